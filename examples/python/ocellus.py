"""ocellus.py: Python binding for ocellus (include/ocellus.h) through the standard library's ctypes
over libocellus.so. No build step, no dependency: copy this file next to your program.

    import ocellus
    model = ocellus.Model("examples/demo/ocellus-demo.gguf", "examples/demo/ocellus-demo-mmproj.gguf")
    ctx = model.context(n_threads=2)
    print(ctx.ask("What color is the circle in image 1?", images=["examples/demo/shapes.ppm"]))
    for piece in ctx.ask("Where is the circle in image 1?", images=["examples/demo/shapes.ppm"], stream=True):
        print(piece, end="", flush=True)

Images: a path (str or os.PathLike), the bytes of a PNG / JPEG / PNM file, or an H x W x 3 uint8
buffer (a numpy array, or any object with the buffer protocol and that shape: a memoryview cast
with shape=(H, W, 3)). Errors raise ocellus.Error with the library's one-line message and status.
The library is found in $OCELLUS_LIB, next to this file, in the source tree's root (two folders up)
or by the system's loader, in that order. docs/python.md has the details and the memory arithmetic.
"""
import ctypes
import os
import queue
import threading

__all__ = ["Error", "Model", "Context", "Stats", "CountingAllocator", "load_library"]

_c_int32, _c_int64, _c_uint64, _c_size = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_size_t

# ---- the C structs, field for field as include/ocellus.h declares them --------------------------

_ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, _c_size, _c_size)
_TEXT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char), _c_size)


class _Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("message", ctypes.c_char * 256)]


class _Allocator(ctypes.Structure):
    _fields_ = [("fn", _ALLOC_FN), ("user", ctypes.c_void_p)]


class _ModelParams(ctypes.Structure):
    _fields_ = [("text_path", ctypes.c_char_p), ("mmproj_path", ctypes.c_char_p),
                ("alloc", ctypes.POINTER(_Allocator)), ("load", ctypes.c_int)]


class _ContextParams(ctypes.Structure):
    _fields_ = [("max_context_tokens", _c_int32), ("max_images", _c_int32), ("max_image_tokens", _c_int32),
                ("min_image_tokens", _c_int32), ("batch_tokens", _c_int32), ("n_threads", ctypes.c_int),
                ("plan_path", ctypes.c_char_p), ("alloc", ctypes.POINTER(_Allocator)),
                ("progress", ctypes.c_void_p), ("progress_user", ctypes.c_void_p), ("backend", ctypes.c_int),
                ("device", ctypes.c_char_p), ("on_attention", ctypes.c_void_p), ("attention_user", ctypes.c_void_p),
                ("max_image_pixels", _c_int64), ("max_answer_tokens", _c_int32)]


class _ModelInfo(ctypes.Structure):
    _fields_ = [(n, _c_int32) for n in ("n_vocab", "n_embd", "n_layers", "n_head", "n_head_kv", "head_dim", "n_ff")] + \
               [("has_vision", ctypes.c_int), ("projector", ctypes.c_char_p), ("vision_layers", _c_int32),
                ("vision_hidden", _c_int32), ("vision_heads", _c_int32), ("n_ctx_train", _c_int32),
                ("memory_bytes", _c_size)]


class _ImageRGB(ctypes.Structure):
    _fields_ = [("rgb", ctypes.c_void_p), ("width_px", _c_int32), ("height_px", _c_int32), ("stride_bytes", _c_size)]


class _Image(ctypes.Structure):
    _fields_ = [("rgb", ctypes.c_void_p), ("width_px", _c_int32), ("height_px", _c_int32), ("stride_bytes", _c_size),
                ("alloc_bytes", _c_size), ("alloc", _Allocator)]


class _ImageLimits(ctypes.Structure):
    _fields_ = [("max_width_px", _c_int64), ("max_height_px", _c_int64), ("max_pixels", _c_int64),
                ("reduce_to_pixels", _c_int64)]


class _Sampling(ctypes.Structure):
    _fields_ = [("temperature", ctypes.c_float), ("top_k", _c_int32), ("top_p", ctypes.c_float), ("seed", _c_uint64)]


class _Request(ctypes.Structure):
    _fields_ = [("system", ctypes.c_char_p), ("question", ctypes.c_char_p), ("images", ctypes.POINTER(_ImageRGB)),
                ("n_images", _c_int32), ("max_new_tokens", _c_int32), ("image_labels", _c_int32),
                ("sampling", _Sampling), ("on_text", _TEXT_FN), ("user", ctypes.c_void_p),
                ("image_paths", ctypes.c_void_p)]


class Stats(ctypes.Structure):
    """oc_stats: the latest ask's counts and timings (milliseconds) and the context's memory."""
    _fields_ = [(n, _c_int32) for n in ("n_images", "n_image_tokens", "n_prompt_tokens", "n_generated")] + \
               [(n, ctypes.c_double) for n in ("vision_ms", "prefill_ms", "ttft_ms", "decode_ms")] + \
               [(n, _c_uint64) for n in ("attn_flops_kept", "attn_flops_skipped", "attn_prefill_flops_kept",
                                         "attn_prefill_flops_skipped", "attn_decode_flops_kept",
                                         "attn_decode_flops_skipped")] + \
               [(n, _c_size) for n in ("context_bytes", "device_bytes", "kv_bytes", "kv_prefill_bytes",
                                       "kv_capacity_bytes")] + \
               [("peak_rss_bytes", _c_uint64)]

    def __repr__(self):
        return "Stats(%s)" % ", ".join("%s=%r" % (f[0], getattr(self, f[0])) for f in self._fields_)


_BACKENDS = {"cpu": 0, "opencl": 1, "auto": 2}
_lib = None


def load_library(path=None):
    """Load libocellus.so once (see the module's docstring for where it is looked for)."""
    global _lib
    if _lib is not None and path is None:
        return _lib
    here = os.path.dirname(os.path.abspath(__file__))
    names = [path] if path else [os.environ.get("OCELLUS_LIB"), os.path.join(here, "libocellus.so"),
                                 os.path.join(here, "..", "..", "libocellus.so"), "libocellus.so"]
    err = None
    for name in names:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as e:
            err = e
    else:
        raise OSError("libocellus.so not found (build it with make, or set OCELLUS_LIB): %s" % err)
    sig = [
        ("oc_model_params_default", None, [ctypes.POINTER(_ModelParams)]),
        ("oc_model_open_params", ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(_ModelParams), ctypes.POINTER(_Error)]),
        ("oc_model_close", None, [ctypes.c_void_p]),
        ("oc_model_get_info", None, [ctypes.c_void_p, ctypes.POINTER(_ModelInfo)]),
        ("oc_context_params_default", None, [ctypes.POINTER(_ContextParams)]),
        ("oc_context_open", ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.POINTER(_ContextParams), ctypes.POINTER(_Error)]),
        ("oc_context_close", None, [ctypes.c_void_p]),
        ("oc_context_backend_name", ctypes.c_char_p, [ctypes.c_void_p]),
        ("oc_context_get_stats", None, [ctypes.c_void_p, ctypes.POINTER(Stats)]),
        ("oc_request_default", None, [ctypes.POINTER(_Request)]),
        ("oc_ask", ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_Request), ctypes.POINTER(_Error)]),
        ("oc_image_limits_default", None, [ctypes.POINTER(_ImageLimits)]),
        ("oc_image_decode", ctypes.c_int, [ctypes.POINTER(_Image), ctypes.c_void_p, _c_size, ctypes.POINTER(_ImageLimits), ctypes.POINTER(_Allocator), ctypes.POINTER(_Error)]),
        ("oc_image_load", ctypes.c_int, [ctypes.POINTER(_Image), ctypes.c_char_p, ctypes.POINTER(_ImageLimits), ctypes.POINTER(_Allocator), ctypes.POINTER(_Error)]),
        ("oc_image_free", None, [ctypes.POINTER(_Image)]),
        ("oc_status_str", ctypes.c_char_p, [ctypes.c_int]),
    ]
    for name, res, args in sig:
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    _lib = lib
    return lib


class Error(Exception):
    """An ocellus call failed: str(e) is the library's message; e.status its oc_status number and
    e.status_name its short name ("i/o error", "format error" ...)."""

    def __init__(self, err):
        self.status = err.status
        self.status_name = load_library().oc_status_str(err.status).decode()
        super().__init__(err.message.decode("utf-8", "replace"))


def _check(status, err):
    if status != 0:
        raise Error(err)


class CountingAllocator:
    """An oc_allocator that counts: live_bytes and live_blocks are 0 once everything it gave out is
    back (the binding's tests use it to show nothing leaks). Memory comes from the C library."""

    def __init__(self):
        self.live_bytes = self.live_blocks = self.peak_bytes = self.calls = 0
        libc = ctypes.CDLL(None)
        libc.realloc.restype, libc.realloc.argtypes = ctypes.c_void_p, [ctypes.c_void_p, _c_size]
        libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
        self._lock = threading.Lock()

        def fn(user, ptr, old_bytes, new_bytes):
            with self._lock:
                self.calls += 1
                if new_bytes == 0:
                    libc.free(ptr)
                    if ptr:
                        self.live_bytes -= old_bytes
                        self.live_blocks -= 1
                    return None
                p = libc.realloc(ptr, new_bytes)
                if p:
                    self.live_bytes += new_bytes - (old_bytes if ptr else 0)
                    self.live_blocks += 0 if ptr else 1
                    self.peak_bytes = max(self.peak_bytes, self.live_bytes)
                return p

        self._fn = _ALLOC_FN(fn)   # kept alive as long as the allocator is
        self.c = _Allocator(self._fn, None)


class Model:
    """A text GGUF plus, for images, its mmproj GGUF; read-only once open, shared by its contexts."""

    def __init__(self, path, mmproj=None, allocator=None, read=False):
        lib = load_library()
        self._lib, self._allocator, self._h = lib, allocator, None
        self._alloc_ptr = ctypes.pointer(allocator.c) if allocator else None
        mp = _ModelParams()
        lib.oc_model_params_default(ctypes.byref(mp))
        mp.text_path = os.fsencode(path)
        mp.mmproj_path = os.fsencode(mmproj) if mmproj else None
        mp.alloc = self._alloc_ptr
        mp.load = 1 if read else 0
        err, h = _Error(), ctypes.c_void_p()
        _check(lib.oc_model_open_params(ctypes.byref(h), ctypes.byref(mp), ctypes.byref(err)), err)
        self._h = h
        self._contexts = []

    def info(self):
        mi = _ModelInfo()
        self._lib.oc_model_get_info(self._h, ctypes.byref(mi))
        return {f[0]: (getattr(mi, f[0]).decode() if f[0] == "projector" else getattr(mi, f[0])) for f in mi._fields_}

    def context(self, n_threads=0, max_context_tokens=4096, max_images=8, max_image_tokens=1280, plan=None,
                backend="cpu", device=None, max_answer_tokens=256):
        """A conversation's memory (KV cache, activations, image work), allocated here, whole."""
        return Context(self, n_threads=n_threads, max_context_tokens=max_context_tokens, max_images=max_images,
                       max_image_tokens=max_image_tokens, plan=plan, backend=backend, device=device,
                       max_answer_tokens=max_answer_tokens)

    def close(self):
        """Close the model's contexts, then the model (also when the object is collected)."""
        for c in self._contexts:
            c.close()
        self._contexts = []
        if self._h:
            self._lib.oc_model_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Context:
    """One conversation at a time; use one context per thread (several may share a model)."""

    def __init__(self, model, **kw):
        lib = model._lib
        self._lib, self._model, self._h = lib, model, None
        cp = _ContextParams()
        lib.oc_context_params_default(ctypes.byref(cp))
        cp.n_threads = kw["n_threads"]
        cp.max_context_tokens = kw["max_context_tokens"]
        cp.max_images = kw["max_images"]
        cp.max_image_tokens = kw["max_image_tokens"]
        cp.max_answer_tokens = kw["max_answer_tokens"]
        cp.plan_path = os.fsencode(kw["plan"]) if kw["plan"] else None
        cp.alloc = model._alloc_ptr
        if kw["backend"] not in _BACKENDS:
            raise ValueError("backend must be one of %s" % ", ".join(_BACKENDS))
        cp.backend = _BACKENDS[kw["backend"]]
        cp.device = kw["device"].encode() if kw["device"] else None
        err, h = _Error(), ctypes.c_void_p()
        _check(lib.oc_context_open(ctypes.byref(h), model._h, ctypes.byref(cp), ctypes.byref(err)), err)
        self._h = h
        model._contexts.append(self)

    @property
    def backend(self):
        return self._lib.oc_context_backend_name(self._h).decode()

    def stats(self):
        s = Stats()
        self._lib.oc_context_get_stats(self._h, ctypes.byref(s))
        return s

    def _images(self, images):
        """Every image as an oc_image_rgb view, and what keeps its pixels alive until the ask ends."""
        keep, decoded, views = [], [], []
        alloc = self._model._alloc_ptr
        lim = _ImageLimits()
        self._lib.oc_image_limits_default(ctypes.byref(lim))
        try:
            for im in images:
                err = _Error()
                if isinstance(im, (str, os.PathLike)):
                    img = _Image()
                    _check(self._lib.oc_image_load(ctypes.byref(img), os.fsencode(im), ctypes.byref(lim), alloc,
                                                   ctypes.byref(err)), err)
                    decoded.append(img)
                    views.append(_ImageRGB(img.rgb, img.width_px, img.height_px, img.stride_bytes))
                elif isinstance(im, (bytes, bytearray)):
                    buf = (ctypes.c_char * len(im)).from_buffer_copy(im)
                    img = _Image()
                    _check(self._lib.oc_image_decode(ctypes.byref(img), buf, len(im), ctypes.byref(lim), alloc,
                                                     ctypes.byref(err)), err)
                    decoded.append(img)
                    views.append(_ImageRGB(img.rgb, img.width_px, img.height_px, img.stride_bytes))
                else:
                    mv = memoryview(im)
                    if mv.ndim != 3 or mv.shape[2] != 3 or mv.itemsize != 1 or not mv.c_contiguous:
                        raise ValueError("an image buffer must be C-contiguous uint8 with shape (height, width, 3)")
                    h, w = mv.shape[0], mv.shape[1]
                    data = (ctypes.c_uint8 * mv.nbytes).from_buffer_copy(mv.cast("B"))
                    keep.append(data)
                    views.append(_ImageRGB(ctypes.cast(data, ctypes.c_void_p), w, h, 3 * w))
        except BaseException:
            for img in decoded:
                self._lib.oc_image_free(ctypes.byref(img))
            raise
        return keep, decoded, views

    def ask(self, question, images=(), max_tokens=256, stream=False, system=None, temperature=0.0, top_k=40,
            top_p=0.95, seed=0):
        """The answer to one question about the images (a new conversation each time): a str, or
        with stream=True a generator of pieces as they are generated (closing it stops the answer)."""
        if not self._h:
            raise ValueError("the context is closed")
        if stream:
            return self._stream(question, images, max_tokens, system, temperature, top_k, top_p, seed)
        pieces = []
        self._run(question, images, max_tokens, system, temperature, top_k, top_p, seed, lambda p: pieces.append(p) or 0)
        return "".join(pieces)

    def _run(self, question, images, max_tokens, system, temperature, top_k, top_p, seed, sink):
        keep, decoded, views = self._images(list(images))
        try:
            req = _Request()
            self._lib.oc_request_default(ctypes.byref(req))
            req.question = question.encode()
            req.system = system.encode() if system else None
            arr = (_ImageRGB * max(1, len(views)))(*views)
            req.images = arr if views else None
            req.n_images = len(views)
            req.max_new_tokens = max_tokens
            req.sampling = _Sampling(temperature, top_k, top_p, seed)
            pending = bytearray()

            def on_text(user, text, n):
                # pieces are whole UTF-8 characters (ocellus.h); decode each as it comes
                pending.extend(ctypes.string_at(text, n))
                s = pending.decode("utf-8", "ignore")
                pending.clear()
                try:
                    return 1 if sink(s) else 0
                except BaseException:
                    return 1

            req.on_text = _TEXT_FN(on_text)
            err = _Error()
            st = self._lib.oc_ask(self._h, ctypes.byref(req), ctypes.byref(err))
            if st != 0 and st != 10:   # 10: OC_ERR_ABORTED, the caller stopped it
                raise Error(err)
        finally:
            for img in decoded:
                self._lib.oc_image_free(ctypes.byref(img))
            del keep

    def _stream(self, question, images, max_tokens, system, temperature, top_k, top_p, seed):
        q, stop = queue.Queue(), threading.Event()
        done = object()

        def work():
            try:
                self._run(question, images, max_tokens, system, temperature, top_k, top_p, seed,
                          lambda p: q.put(p) or stop.is_set())
                q.put(done)
            except BaseException as e:
                q.put(e)

        t = threading.Thread(target=work, daemon=True)
        t.start()
        try:
            while True:
                item = q.get()
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()   # a consumer that stops early ends the answer at the next piece
            t.join()

    def close(self):
        if self._h:
            self._lib.oc_context_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
