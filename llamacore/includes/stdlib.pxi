# Everything the included core/*.pyx files import, in one place: they all share the one module
# namespace of _core.pyx, which includes this file first (as uvloop's includes/stdlib.pxi).

cimport cython
cimport numpy as cnp
from libc.stdio cimport fputs, stderr
from libc.string cimport memcpy, strncpy
from libcpp cimport bool as cbool
from libcpp.string cimport npos, string
from libcpp.vector cimport vector

from llamacore.includes cimport ggml

cdef extern from "includes/argmax.h" nogil:
    int llamacore_argmax(const float * x, int n)     # a greedy sampler's token: the first maximum

cdef extern from "Python.h":
    void * PyGILState_GetThisThreadState() nogil    # NULL on a thread Python does not know
from llamacore.includes cimport ggml_rpc

import collections
import errno
import json
import logging
import math
import os
import sys

import numpy as np

from llamacore.errors import ContextFullError, DecodeAbortedError, DecodeError, GrammarBudgetError
from llamacore.gguf.check import check_gguf_file as _check_gguf_file
