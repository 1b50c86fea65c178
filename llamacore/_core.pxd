# The compiled core is one extension module so that all classes share one copy of the
# statically linked llama.cpp (its backend registry and log callback are process globals).
# Each concept keeps its own .pxd/.pyx pair under core/, included here as uvloop does.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from llamacore.includes cimport chat as lc
from llamacore.includes cimport ggml, llama, mtmd
from llamacore.includes.llama cimport llama_token, llama_pos, llama_seq_id

include "core/model.pxd"
include "core/adapter.pxd"
include "core/batch.pxd"
include "core/context.pxd"
include "core/sampler.pxd"
include "core/token_loop.pxd"
include "core/projector.pxd"
include "core/chat.pxd"
