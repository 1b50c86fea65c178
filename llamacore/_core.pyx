# cython: language_level=3, embedsignature=True
"""Compiled classes bound directly to llama.cpp's C API (see core/*.pyx, one concept each).

No unsafe directive is set module-wide: the few hot loops over raw arrays turn bounds and
wraparound checks off with decorators where they are defined.
"""

include "includes/stdlib.pxi"

cnp.import_array()

include "core/log.pyx"
include "core/backend.pyx"
include "core/rpc.pyx"
include "core/model.pyx"
include "core/adapter.pyx"
include "core/batch.pyx"
include "core/context_params.pyx"
include "core/threadpool.pyx"
include "core/context.pyx"
include "core/context_state.pyx"
include "core/context_lora.pyx"
include "core/sampler.pyx"
include "core/token_loop.pyx"
include "core/projector.pyx"
include "core/quantize.pyx"
include "core/chat.pyx"

_backend_init()
_init_grammar_work_limit()
_install_log_callback()
