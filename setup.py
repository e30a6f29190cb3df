"""Builds framejit's optional C++ guard accelerator when torch is importable at build time.

Install with `pip install --no-build-isolation ...` after torch so the build sees the same torch
the guards will run against. Without torch (an isolated build) or without a compiler, framejit
installs without the accelerator and its guards run in pure Python (slower, equally sound).
"""

from setuptools import setup

ext_modules = []
cmdclass = {}
try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # isolated build: no torch here, pure-Python guards
    pass
else:
    ext_modules.append(
        CppExtension(
            "framejit.guards._tensor_check",
            ["guards/_tensor_check.cpp"],
            define_macros=[("FRAMEJIT_TORCH_VERSION", f'"{torch.__version__}"')],
            extra_compile_args=["-O2"],
            optional=True,
        )
    )
    cmdclass["build_ext"] = BuildExtension.with_options(use_ninja=False)

setup(ext_modules=ext_modules, cmdclass=cmdclass)
