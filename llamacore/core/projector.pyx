# Projector: a multimodal projector (an "mmproj" GGUF, libmtmd) loaded next to one Model. It
# turns images into rows of the model's input embeddings. The pieces:
#   Image       - a decoded RGB bitmap; its id is the SHA-256 of its source (the cache key)
#   ImageChunk  - the image positions of a tokenized prompt (owns a copy of mtmd's chunk)
#   Projector   - loads the mmproj, tokenizes text and images into chunks, encodes image chunks
# Prompts are tokenized from parts (mtmd_tokenize_from_parts), never from text markers, so no
# user text can stand for an image. Decoding the embeddings into a context is an ordinary
# embeddings Batch (Context.decode), so engines batch and place them like any other rows.
# no_gc_clear keeps `model` alive during dealloc: the projector is freed before its model.

ctypedef const mtmd.mtmd_input_part * _part_ptr

_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"), (b"GIF87a", "gif"),
                (b"GIF89a", "gif"), (b"BM", "bmp"))


def _image_format(data):
    for magic, name in _IMAGE_MAGIC:
        if data[:len(magic)] == magic:
            return name
    raise ValueError("unsupported image format: only PNG, JPEG, GIF and BMP are accepted")


cdef class Image:
    """An RGB bitmap ready for a Projector. Build one with Projector.image(bytes) or
    Image.from_array(uint8 array of shape (height, width, 3))."""

    def __cinit__(self):
        self.ptr = NULL

    def __dealloc__(self):
        if self.ptr != NULL:
            mtmd.mtmd_bitmap_free(self.ptr)
            self.ptr = NULL

    @staticmethod
    def from_array(array):
        """An image from RGB pixels; its id is the SHA-256 of the shape and the pixel bytes."""
        import hashlib
        arr = np.ascontiguousarray(array, dtype=np.uint8)
        if arr.ndim != 3 or arr.shape[2] != 3 or arr.shape[0] == 0 or arr.shape[1] == 0:
            raise ValueError(f"an image array must have shape (height, width, 3), got {arr.shape}")
        cdef cnp.ndarray[cnp.uint8_t, ndim=3, mode="c"] pixels = arr
        digest = hashlib.sha256(b"%dx%d:" % (pixels.shape[1], pixels.shape[0]) + pixels.tobytes()).hexdigest()
        cdef Image image = Image.__new__(Image)
        image.ptr = mtmd.mtmd_bitmap_init(pixels.shape[1], pixels.shape[0], <const unsigned char *>pixels.data)
        if image.ptr == NULL:
            raise MemoryError("could not allocate the image")
        mtmd.mtmd_bitmap_set_id(image.ptr, digest.encode())
        image.id = digest
        return image

    @property
    def width(self): return mtmd.mtmd_bitmap_get_nx(self.ptr)
    @property
    def height(self): return mtmd.mtmd_bitmap_get_ny(self.ptr)

    def __repr__(self):
        return f"<Image {self.width}x{self.height} id={self.id[:12]}>"


cdef class ImageChunk:
    """The positions one image takes in a tokenized prompt. `id` is the image's SHA-256 (equal
    ids, equal embeddings); `n_tokens` KV cells; `n_pos` positions advanced (n_tokens unless the
    model uses M-RoPE); `non_causal` when the model must see the image's rows all at once."""

    def __cinit__(self):
        self.ptr = NULL

    def __dealloc__(self):
        if self.ptr != NULL:
            mtmd.mtmd_input_chunk_free(self.ptr)
            self.ptr = NULL

    def __repr__(self):
        return f"<ImageChunk {self.n_tokens} tokens id={self.id[:12]}>"


@cython.no_gc_clear
cdef class Projector:
    """A multimodal projector (mmproj GGUF) for `model`.

    Raises FileNotFoundError for a missing file and ValueError for a file that is not a
    projector, or one whose output width differs from the model's input embedding width.
    Encoding is not thread-safe in libmtmd; a lock serialises it, so share a Projector freely.
    """

    def __cinit__(self):
        self.ptr = NULL

    def __init__(self, Model model not None, path, *, n_threads=None, use_gpu=None, bint warmup=True,
                 int image_min_tokens=-1, int image_max_tokens=-1):
        """`use_gpu` None: offload when llama.cpp has a GPU backend; `n_threads` None: all cores."""
        import threading
        if self.ptr != NULL:
            raise RuntimeError("Projector is already initialized")
        self.path = _check_gguf_file(path, "projector")
        self.model = model
        self._lock = threading.Lock()
        self.n_encoded = 0
        cdef mtmd.mtmd_context_params params = mtmd.mtmd_context_params_default()
        params.use_gpu = llama.llama_supports_gpu_offload() if use_gpu is None else bool(use_gpu)
        params.n_threads = n_threads or os.cpu_count() or 4
        params.print_timings = False
        params.warmup = warmup
        params.image_min_tokens = image_min_tokens
        params.image_max_tokens = image_max_tokens
        cdef bytes bpath = self.path.encode()
        cdef const char * cpath = bpath
        _error_mark()
        with nogil:
            self.ptr = mtmd.mtmd_init_from_file(cpath, model.ptr, params)
        if self.ptr == NULL:
            reason = _errors_since_mark() or "unknown reason"
            raise ValueError(f"failed to load projector {self.path} for model {model.path}: {reason}")
        if not mtmd.mtmd_support_vision(self.ptr):
            mtmd.mtmd_free(self.ptr)
            self.ptr = NULL
            raise ValueError(f"{self.path} is not a vision projector (it has no image encoder)")

    def __dealloc__(self):
        if self.ptr != NULL and self.model is not None and self.model.ptr != NULL:
            mtmd.mtmd_free(self.ptr)
        self.ptr = NULL

    def __repr__(self):
        return f"<Projector {self.path!r}>"

    @staticmethod
    def capabilities(path):
        """{"vision": bool, "audio": bool} from the file's header, without loading its weights."""
        cdef str checked = _check_gguf_file(path, "projector")
        cdef bytes bpath = checked.encode()
        cdef mtmd.mtmd_caps caps = mtmd.mtmd_get_cap_from_file(bpath)
        return {"vision": bool(caps.inp_vision), "audio": bool(caps.inp_audio)}

    @property
    def n_embd(self):
        """Width of each embedding row an image encodes to (the model's input width)."""
        return llama.llama_model_n_embd_inp(self.model.ptr)

    @property
    def uses_mrope(self):
        """Whether image rows take 2-D (M-RoPE) positions, as Qwen-VL models do."""
        return mtmd.mtmd_decode_use_mrope(self.ptr)

    def image(self, data):
        """Decode an encoded image (PNG, JPEG, GIF or BMP bytes); its id is the bytes' SHA-256."""
        cdef const unsigned char[::1] buf = memoryview(data).cast("B")
        if buf.shape[0] == 0:
            raise ValueError("empty image")
        _image_format(bytes(buf[:8]))
        cdef mtmd.mtmd_helper_bitmap_wrapper wrapped
        with nogil:
            wrapped = mtmd.mtmd_helper_bitmap_init_from_buf(self.ptr, &buf[0], buf.shape[0], False,
                                                            mtmd.mtmd_helper_init_opt_default())
        if wrapped.bitmap == NULL:
            raise ValueError("the image could not be decoded (truncated or corrupt)")
        cdef Image image = Image.__new__(Image)
        image.ptr = wrapped.bitmap
        if mtmd.mtmd_bitmap_is_audio(image.ptr):
            raise ValueError("audio is not an image")
        image.id = mtmd.mtmd_bitmap_get_id(image.ptr).decode()
        return image

    def tokenize(self, parts, *, bint add_special=True, bint parse_special=True):
        """Tokenize `parts` (str text and Image, in order) into a list whose items are token-id
        lists (text) and ImageChunk (each image, wrapped in the model's image tokens if any)."""
        parts = list(parts)
        cdef Py_ssize_t n = len(parts), k
        cdef vector[mtmd.mtmd_input_text] texts
        cdef vector[mtmd.mtmd_input_part] cparts
        cdef vector[_part_ptr] pointers
        texts.resize(n)
        cparts.resize(n)
        pointers.resize(n)
        keep = []                                  # the encoded text must outlive the call
        for k in range(n):
            part = parts[k]
            cparts[k].text = NULL
            cparts[k].bitmap = NULL
            if isinstance(part, Image):
                cparts[k].bitmap = (<Image>part).ptr
            elif isinstance(part, str):
                encoded = part.encode("utf-8")
                keep.append(encoded)
                texts[k].text = <const char *>encoded
                texts[k].text_len = len(encoded)
                texts[k].add_special = False
                texts[k].parse_special = parse_special
                cparts[k].text = &texts[k]
            else:
                raise TypeError(f"a prompt part must be str or Image, got {type(part).__name__}")
            pointers[k] = &cparts[k]
        cdef mtmd.mtmd_input_chunks * chunks = mtmd.mtmd_input_chunks_init()
        cdef int32_t rc
        try:
            _error_mark()
            with nogil:
                rc = mtmd.mtmd_tokenize_from_parts(self.ptr, chunks, pointers.data(), n, add_special)
            if rc != 0:
                reason = _errors_since_mark() or f"error {rc}"
                raise ValueError(f"could not tokenize the prompt with its images: {reason}")
            return self._chunk_list(chunks)
        finally:
            mtmd.mtmd_input_chunks_free(chunks)

    cdef list _chunk_list(self, mtmd.mtmd_input_chunks * chunks):
        cdef size_t i, n_text
        cdef const mtmd.mtmd_input_chunk * chunk
        cdef const llama_token * tokens
        cdef ImageChunk image
        out = []
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            kind = mtmd.mtmd_input_chunk_get_type(chunk)
            if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, &n_text)
                out.append([tokens[k] for k in range(n_text)])
            elif kind == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                image = ImageChunk.__new__(ImageChunk)
                image.ptr = mtmd.mtmd_input_chunk_copy(chunk)
                image.id = mtmd.mtmd_input_chunk_get_id(chunk).decode()
                image.n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
                image.n_pos = mtmd.mtmd_input_chunk_get_n_pos(chunk)
                image.non_causal = mtmd.mtmd_decode_use_non_causal(self.ptr, chunk)
                out.append(image)
            else:
                raise ValueError("audio input is not supported")
        return out

    def encode(self, ImageChunk chunk not None):
        """The image's embedding rows, float32 of shape (n_tokens, n_embd). Runs the vision
        encoder with the GIL released."""
        cdef int32_t rc
        cdef int n_embd = llama.llama_model_n_embd_inp(self.model.ptr)
        cdef cnp.ndarray[cnp.float32_t, ndim=2, mode="c"] out = np.empty((chunk.n_tokens, n_embd), dtype=np.float32)
        cdef float * embd
        with self._lock:
            _error_mark()
            with nogil:
                rc = mtmd.mtmd_encode_chunk(self.ptr, chunk.ptr)
                embd = mtmd.mtmd_get_output_embd(self.ptr) if rc == 0 else NULL
                if embd != NULL:
                    memcpy(out.data, embd, chunk.n_tokens * n_embd * sizeof(float))
            if rc != 0 or embd == NULL:
                raise ValueError(f"image encoding failed: {_errors_since_mark() or f'error {rc}'}")
            self.n_encoded += 1
        return out
