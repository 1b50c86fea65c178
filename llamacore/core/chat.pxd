cdef class ChatTemplates:
    cdef lc.common_chat_templates * ptr          # owned: common_chat_templates_free in __dealloc__


cdef class ChatParams:
    cdef lc.common_chat_params c
    cdef readonly str prompt


cdef class ChatParser:
    cdef lc.common_chat_parser_params params
    cdef lc.common_chat_msg msg                   # the message parsed so far
    cdef string generated                         # the answer's text so far (UTF-8)
    cdef vector[string] ids                       # tool call ids, kept across partial parses
    cdef object new_id
    cdef readonly bint failed

    cdef void _assign_ids(self, lc.common_chat_msg & msg) except *
    cdef list _advance(self, lc.common_chat_msg & new_msg)
