# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled classes bound directly to llama.cpp's C API (see core/*.pyx, one concept each)."""
import os

cimport cython
from libcpp cimport bool as cbool
cimport numpy as cnp
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, strncpy

import numpy as np

from llamacore.errors import ContextFullError, DecodeAbortedError, DecodeError

cnp.import_array()

include "core/log.pyx"
include "core/gguf_check.pyx"
include "core/model.pyx"
include "core/adapter.pyx"
include "core/batch.pyx"
include "core/context.pyx"
include "core/sampler.pyx"

llama.llama_backend_init()
_install_log_callback()
