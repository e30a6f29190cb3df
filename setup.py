"""Builds framejit's optional C++ guard accelerator when torch is importable at build time.

Install with `pip install --no-build-isolation ...` after torch so the build sees the same torch
the guards will run against. Without torch (an isolated build) or without a compiler, framejit
installs without the accelerator and its guards run in pure Python (slower, equally sound).
"""

import os
import sysconfig

from setuptools import Extension, setup
from setuptools.command.editable_wheel import editable_wheel

# The PEP 523 frame hook (plain CPython API, no torch headers): whole-script mode needs it,
# `jit` does not, so a failed build still installs framejit.
ext_modules = [
    Extension(
        "framejit.frontend._eval_frame",
        ["frontend/_eval_frame.c"],
        # initial-exec: the thread-locals are read on every frame; the general TLS model pays a
        # call for each read (a few percent of a call-heavy program's time)
        extra_compile_args=["-O2", "-std=c11", "-ftls-model=initial-exec"],
        optional=True,
    )
]


class EditableWheel(editable_wheel):
    """An editable install that also installs `data_files` (framejit.pth), as a wheel does.

    setuptools' editable_wheel asks `has_data()`, which Distribution does not define, so it
    silently drops data files; running install_data here puts them in the editable wheel's
    .data folder, which pip installs relative to the prefix like any wheel's.
    """

    def _run_install(self, category: str) -> None:
        super()._run_install(category)
        if category == "data" and self.distribution.has_data_files():
            self.run_command("install_data")


cmdclass = {"editable_wheel": EditableWheel}
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

# framejit.pth goes beside the installed packages (site-packages), in regular and editable
# installs alike: data files are placed relative to the install prefix. It does nothing unless
# FRAMEJIT=1 is set (see framejit/wholescript.py).
_site = os.path.relpath(sysconfig.get_path("purelib"), sysconfig.get_path("data"))
setup(ext_modules=ext_modules, cmdclass=cmdclass, data_files=[(_site, ["framejit.pth"])])
