"""framejit's frontend: symbolic execution of CPython bytecode into fx graphs plus guards.

Entry point: `framejit.frontend.convert.compile_frame`. The translator (`translator.py` and the
opcode handlers in `handlers/`) never knows about Triton or CUDA graphs; it hands each captured
graph to whatever backend callable it was given.
"""
