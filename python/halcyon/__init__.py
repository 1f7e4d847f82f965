"""halcyon from Python: run operators and the MoE layer on PyTorch tensors (or NumPy arrays,
or anything with ``__dlpack__``) without copying them.

    import torch, halcyon
    x = torch.randn(1000, device="cuda"); y = torch.randn_like(x); z = torch.empty_like(x)
    halcyon.run("vector_add", a=x, b=y, c=z)           # z = x + y, written in place
    out = halcyon.moe_layer(x_bf16, w_router, w_gate_up, w_down, bias=b, topk=8,
                            n_groups=8, topk_groups=4)
    layer = halcyon.MoeLayer(w_router, bias=b, fp8=dict(w_gate_up=..., w_gate_up_scale=...,
                             w_down=..., w_down_scale=...))  # FP8 experts, kept for many calls
    out = layer(x_bf16)

How it works: each tensor is handed over through DLPack (``__dlpack__``) and wrapped as a hal
buffer (halcyon/dlpack.h, ``hrt_dlpack_import_flags``): the same memory, checked for device, dtype
and contiguity. Outputs are tensors you allocate (``moe_layer`` allocates ``out`` like ``x``
when you do not). When every tensor of a call is a torch GPU tensor (CUDA, or HIP on a ROCm
build of PyTorch, whose tensors DLPack gives as ROCm memory: halcyon's hip: devices), the call is
queued on PyTorch's current stream (imported through hal_stream_import), in order with torch's work
before and after it, and returns without waiting, as a torch operator does: read the result
on that stream, or synchronize before reading it on the host or on another stream. Otherwise
(NumPy, CPU tensors) a call runs on a halcyon stream of the tensors' device after the
producer's pending work and waits for it. Calls of one MoeLayer share its workspace: queue them
on one stream (or order them).

Bindings: ctypes over the C ABI (hal.h, runtime.h, dlpack.h) — nothing to compile, one file
that works with any CPython 3, and the C ABI is what halcyon versions and keeps stable.
(nanobind is not packaged in Debian 12, and a compiled extension would tie the module to
one Python version.)

The library: ``halcyon.load(path)`` if called first, else ``HALCYON_LIBRARY`` (a path to
libhalcyon_runtime.so), else, for the module of an install (``cmake --install`` puts it in
<prefix>/lib/python3/dist-packages), the library of that install, else
``libhalcyon_runtime.so.0`` through the system's loader (LD_LIBRARY_PATH, or a standard place).

libhalcyon reads no environment variable: ``load`` hands hal_init the choices of the variables
the ``halcyon`` command documents (HALCYON_BACKEND_PATH, HALCYON_LOG, HALCYON_CACHE_DIR, ...;
tools/README.md), mapped the same way, so the PTX cache and the log level behave as there.
Backend options (hal.h lists them: ``cuda.library``, ``hip.library``, ``ze.loader``, ...) go
through the API: ``halcyon.load(backend_options={"hip.library": "/opt/rocm-6.2/lib/libamdhip64.so"})``
before any other call; they come after the variables' choices, so a key given here wins. A load
that fails (a malformed key) may be retried, corrected.
"""
import atexit
import ctypes
import os
import sys
import threading

__all__ = ["load", "run", "prepare", "Prepared", "moe_layer", "MoeLayer", "bf16", "e4m3", "empty", "device_address", "HalcyonError"]


class HalcyonError(RuntimeError):
    """A hal_error: ``status`` (e.g. "HAL_INVALID_ARGUMENT") and the message."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status


# ---- the C ABI -------------------------------------------------------------------------------

_MAX_RANK = 8
_DTYPES = ["f32", "f16", "bf16", "i32", "i64", "u8", "f64", "e4m3"]  # hrt_dtype order
_EXT_MOE_FP8_WEIGHTS = 0x48520001  # HRT_EXTENSION_MOE_FP8_WEIGHTS
_EXT_MOE_LAYER_IMPLS = 0x48520002  # HRT_EXTENSION_MOE_LAYER_IMPLS (ABI 1.10)
_FP8_PARTS = ("w_gate_up", "w_gate_up_scale", "w_down", "w_down_scale")
_FROM_DLPACK = 0xFFFFFFFF
_OWNER_ORDERED = 1  # HAL_BUFFER_IMPORT_OWNER_ORDERED (ABI 1.5)
_DL_DEVICES = {1: "cpu", 2: "cuda", 10: "hip", 14: "ze"}  # kDLCPU, kDLCUDA, kDLROCM, kDLOneAPI


class _Tensor(ctypes.Structure):  # hrt_tensor
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p), ("name", ctypes.c_char_p),
                ("buffer", ctypes.c_void_p), ("offset", ctypes.c_uint64), ("dtype", ctypes.c_uint32),
                ("rank", ctypes.c_uint32), ("shape", ctypes.c_int64 * _MAX_RANK)]


class _Param(ctypes.Structure):  # hrt_param
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p), ("name", ctypes.c_char_p),
                ("value", ctypes.c_char_p)]


class _CallOptions(ctypes.Structure):  # hrt_call_options (ABI 1.7)
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p), ("impl", ctypes.c_char_p)]


def _call_options(impl):
    """The hrt_call_options of a call: the implementation by name, or None (the registry's choice)."""
    if impl is None:
        return None
    if not isinstance(impl, str):
        raise TypeError(f"impl is a {type(impl).__name__}: an implementation's name is a str")
    return ctypes.byref(_CallOptions(ctypes.sizeof(_CallOptions), None, impl.encode()))


class _MoeDesc(ctypes.Structure):  # hrt_moe_layer_desc
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p)] + \
               [(n, ctypes.c_int64) for n in ("hidden", "inter", "experts", "topk", "n_groups", "topk_groups",
                                              "expert_begin", "local_experts")] + \
               [("softmax", ctypes.c_uint32), ("normalize", ctypes.c_uint32), ("routed_scale", ctypes.c_double)] + \
               [(n, ctypes.c_void_p) for n in ("w_router", "bias", "w_gate_up", "w_down")]


class _MoeFp8(ctypes.Structure):  # hrt_moe_fp8_weights, in hrt_moe_layer_desc's next chain
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p), ("type", ctypes.c_uint32)] + \
               [(n, ctypes.c_void_p) for n in _FP8_PARTS] + [("dequantize_elsewhere", ctypes.c_uint32)]  # 1.9


class _OpImpl(ctypes.Structure):  # hrt_op_impl
    _fields_ = [("op", ctypes.c_char_p), ("impl", ctypes.c_char_p)]


class _MoeImpls(ctypes.Structure):  # hrt_moe_layer_impls, in hrt_moe_layer_desc's next chain (1.10)
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p), ("type", ctypes.c_uint32),
                ("count", ctypes.c_uint32), ("entries", ctypes.POINTER(_OpImpl))]


class _MoeInfo(ctypes.Structure):  # hrt_moe_layer_info
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p), ("fp8_experts", ctypes.c_uint32),
                ("gather", ctypes.c_uint32), ("fp8_dequantized", ctypes.c_uint32)]  # the last: 1.9


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class _DLTensor(ctypes.Structure):  # DLPack 0.6-0.8
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", ctypes.c_uint8 * 4), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _BufferDesc(ctypes.Structure):  # hal_buffer_desc
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p), ("kind", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("size", ctypes.c_uint64), ("alignment", ctypes.c_uint64)]


class _StreamImportDesc(ctypes.Structure):  # hal_stream_import_desc (ABI 1.5)
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p), ("native", ctypes.c_uint64),
                ("flags", ctypes.c_uint32), ("reserved0", ctypes.c_uint32)]


class _BufferInfo(ctypes.Structure):  # hal_buffer_info
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p), ("kind", ctypes.c_uint32),
                ("reserved0", ctypes.c_uint32), ("size", ctypes.c_uint64), ("device_address", ctypes.c_uint64),
                ("host_pointer", ctypes.c_void_p)]


class _DeviceInfo(ctypes.Structure):  # hal_device_info
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p), ("uri", ctypes.c_char * 64),
                ("name", ctypes.c_char * 128), ("vendor", ctypes.c_char * 64), ("arch", ctypes.c_char * 32),
                ("compute_units", ctypes.c_uint32), ("simd_width", ctypes.c_uint32), ("memory_bytes", ctypes.c_uint64),
                ("max_shared_per_block", ctypes.c_uint32), ("max_threads_per_block", ctypes.c_uint32),
                ("clock_khz", ctypes.c_uint32), ("reserved0", ctypes.c_uint32), ("capabilities", ctypes.c_char * 512),
                ("l2_cache_bytes", ctypes.c_uint64), ("memory_bytes_per_s", ctypes.c_uint64)]


class _InitDesc(ctypes.Structure):  # hal_init_desc
    _fields_ = [("struct_size", ctypes.c_size_t), ("next", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("backend_path", ctypes.c_char_p), ("backend_options", ctypes.c_char_p),
                ("log_level", ctypes.c_char_p)]


_HAL_UNSUPPORTED, _HAL_FAILED_PRECONDITION = 7, 12
# Variable -> backend option, as tools/init_options.hpp maps them (HALCYON_CLI_ENV_OPTIONS).
_ENV_OPTIONS = (("HALCYON_CUDA_LIBRARY", "cuda.library"), ("HALCYON_SIM_MAX_INSTRUCTIONS", "amdgpu-sim.max_instructions"),
                ("HALCYON_SIM_COVERAGE", "amdgpu-sim.coverage"))


def _environment_choices(env):
    """(backend_path, backend_options, log_level) from the documented variables."""
    if env.get("HALCYON_PTX_CACHE") in ("0", "off", "OFF"):
        cache = "off"
    elif env.get("HALCYON_CACHE_DIR"):
        cache = env["HALCYON_CACHE_DIR"] + "/ptx"
    elif env.get("XDG_CACHE_HOME"):
        cache = env["XDG_CACHE_HOME"] + "/halcyon/ptx"
    elif env.get("HOME"):
        cache = env["HOME"] + "/.cache/halcyon/ptx"
    else:
        cache = "off"
    options = ["cuda.cache_dir=" + cache] + [f"{key}={env[var]}" for var, key in _ENV_OPTIONS if var in env]
    return env.get("HALCYON_BACKEND_PATH"), ";".join(options), env.get("HALCYON_LOG")


_lib = None
_E = ctypes.c_void_p  # hal_error*
_SIGNATURES = {
    "hal_error_status": (ctypes.c_int, [_E]), "hal_error_message": (ctypes.c_char_p, [_E]),
    "hal_error_free": (None, [_E]), "hal_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "hal_init": (_E, [ctypes.POINTER(_InitDesc)]),
    "hal_device_open": (_E, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
    "hal_device_release": (_E, [ctypes.c_void_p]),
    "hal_device_get_info": (_E, [ctypes.c_void_p, ctypes.POINTER(_DeviceInfo)]),
    "hal_stream_create": (_E, [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
    "hal_stream_synchronize": (_E, [ctypes.c_void_p]),
    "hal_stream_import": (_E, [ctypes.c_void_p, ctypes.POINTER(_StreamImportDesc), ctypes.POINTER(ctypes.c_void_p)]),
    "hal_stream_release": (_E, [ctypes.c_void_p]),
    "hal_buffer_create": (_E, [ctypes.c_void_p, ctypes.POINTER(_BufferDesc), ctypes.POINTER(ctypes.c_void_p)]),
    "hal_buffer_release": (_E, [ctypes.c_void_p]),
    "hal_buffer_get_info": (_E, [ctypes.c_void_p, ctypes.POINTER(_BufferInfo)]),
    "hrt_run_op_with": (_E, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_Tensor),
                             ctypes.c_uint32, ctypes.POINTER(_Param), ctypes.c_uint32, ctypes.POINTER(_CallOptions)]),
    "hrt_op_create_with": (_E, [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_Tensor), ctypes.c_uint32,
                                ctypes.POINTER(_Param), ctypes.c_uint32, ctypes.POINTER(_CallOptions),
                                ctypes.POINTER(ctypes.c_void_p)]),
    "hrt_op_run": (_E, [ctypes.c_void_p, ctypes.c_void_p]),
    "hrt_op_impl_name": (ctypes.c_char_p, [ctypes.c_void_p]),
    "hrt_op_release": (None, [ctypes.c_void_p]),
    "hrt_moe_layer_create": (_E, [ctypes.c_void_p, ctypes.POINTER(_MoeDesc), ctypes.POINTER(ctypes.c_void_p)]),
    "hrt_moe_layer_forward": (_E, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_int64]),
    "hrt_moe_layer_destroy": (None, [ctypes.c_void_p]),
    "hrt_moe_layer_get_info": (_E, [ctypes.c_void_p, ctypes.POINTER(_MoeInfo)]),
    "hrt_dlpack_import_flags": (_E, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32,
                                     ctypes.c_uint32, ctypes.POINTER(_Tensor)]),
    "hrt_dlpack_export": (_E, [ctypes.c_void_p, ctypes.POINTER(_Tensor), ctypes.POINTER(ctypes.c_void_p)]),
}


_ABI = (1, 10)  # 1.5: hal_stream_import and HAL_BUFFER_IMPORT_OWNER_ORDERED (calls on torch tensors); 1.6: hrt_op_* (prepare);
#                 1.7: hrt_run_op_with / hrt_op_create_with (impl=); 1.9: MoeLayer(fp8_fallback=); 1.10:
#                 MoeLayer(impl=) (an older library would ignore both)


def _check_abi(major, minor, where):
    """A library of another ABI major, or an older minor, than this module binds: say so by name
    (rather than failing on the first missing symbol)."""
    if major != _ABI[0] or minor < _ABI[1]:
        raise HalcyonError("HAL_VERSION_MISMATCH", f"{where} is halcyon ABI {major}.{minor}; this module needs "
                                                   f"{_ABI[0]}.{_ABI[1]} or a later {_ABI[0]}.x (build the "
                                                   f"library from the same tree, or point HALCYON_LIBRARY at it)")


def _installed_library():
    """The library of the install this module belongs to (cmake --install writes _install.py beside
    it, with the library's path relative to this folder), or None: the source tree's module, or a
    copy of the module taken out of its install."""
    try:
        from . import _install
    except ImportError:
        return None
    where = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), _install.LIBRARY))
    return where if os.path.exists(where) else None


def load(path=None, backend_options=None):
    """Opens libhalcyon_runtime (see the module's doc for where it is looked for) and initialises
    it once. ``backend_options``: a dict of hal.h's backend options ({"hip.library": FILE}),
    applied after the environment's (a key given here wins); only before the library is
    initialised, since hal_init takes them once."""
    global _lib
    if _lib is not None and backend_options:
        raise HalcyonError("HAL_FAILED_PRECONDITION", "halcyon.load(backend_options=...): the library is initialised "
                                                      "already; pass the options in the first call, before any other")
    if _lib is not None and path is None:
        return _lib
    where = path or os.environ.get("HALCYON_LIBRARY") or _installed_library() or "libhalcyon_runtime.so.0"
    lib = ctypes.CDLL(where)
    major, minor = ctypes.c_uint32(), ctypes.c_uint32()
    lib.hal_abi_version.restype = None
    lib.hal_abi_version(ctypes.byref(major), ctypes.byref(minor))
    _check_abi(major.value, minor.value, where)
    for name, (res, args) in _SIGNATURES.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    path_, options, level = _environment_choices(os.environ)
    options = ";".join([options] + [f"{k}={v}" for k, v in (backend_options or {}).items()])
    desc = _InitDesc(ctypes.sizeof(_InitDesc), None, 0, path_ and path_.encode(), options.encode(),
                     level and level.encode())
    err = lib.hal_init(ctypes.byref(desc))
    if err and lib.hal_error_status(err) == _HAL_FAILED_PRECONDITION:
        # Discovered already: by an earlier load (another path, or a hal_init that failed after
        # discovery, when a backend refused its option's value) or by another user of the library.
        # Usable, but options given now were not applied: say so rather than drop them.
        lib.hal_error_free(err)
        err = None
        if backend_options:
            raise HalcyonError("HAL_FAILED_PRECONDITION", f"halcyon.load(backend_options={backend_options!r}): the "
                                                          f"library's backends were discovered already, so these "
                                                          f"options were not applied")
    _raise_error(lib, err)
    # Only now: a desc hal_init refused before discovery leaves the library uninitialised, and
    # a corrected load must be able to try again (hal.h's hal_init).
    _lib = lib
    return lib


def _raise_error(lib, err):
    """Raises hal_error `err` (freed) of `lib` as a HalcyonError; nothing when it is NULL."""
    if err:
        status = lib.hal_status_name(lib.hal_error_status(err)).decode()
        message = lib.hal_error_message(err).decode(errors="replace")
        lib.hal_error_free(err)
        raise HalcyonError(status, message)


def _check(err):
    if err:
        _raise_error(load(), err)


# ---- devices and streams ---------------------------------------------------------------------

_devices = {}  # the device's own uri (hal_device_info.uri) -> its handle
_uris = {}  # a device as given ("cpu", "cpu:0") -> its own uri ("cpu:0")
_local = threading.local()
_lock = threading.Lock()


def _open(given, quiet=False):
    """The own uri of device `given`, opened and kept once per device whatever the spelling.
    Where it does not open: the open's error, or None when `quiet`."""
    known = _uris.get(given)  # every call's tensors come here: no lock once known
    if known is not None:
        return known
    with _lock:
        uri = _uris.get(given)
        if uri is None:
            h = ctypes.c_void_p()
            err = load().hal_device_open(given.encode(), ctypes.byref(h))
            if err and quiet:
                load().hal_error_free(err)
                return None
            _check(err)
            info = _DeviceInfo()
            info.struct_size = ctypes.sizeof(_DeviceInfo)
            err = load().hal_device_get_info(h, ctypes.byref(info))
            if err:
                load().hal_error_free(load().hal_device_release(h))
                _check(err)
            uri = info.uri.decode()
            if uri in _devices:  # another spelling of a device open already
                _check(load().hal_device_release(h))
            else:
                _devices[uri] = h
            _uris[given] = uri
        return uri


def _canonical(given):
    """Device `given` by its own uri ("cpu" is "cpu:0", hal.h's hal_device_open): how calls compare
    it with their tensors' devices and key their caches. As given where it does not open (the
    call then names it in its error: a tensor on another device, or the open's)."""
    return _open(given, quiet=True) or given


def _device(uri):
    """The handle of device `uri` (any spelling of it)."""
    return _devices[_open(uri)]


def _stream(uri):
    """This thread's stream on `uri` (streams are not shared between threads)."""
    streams = _local.__dict__.setdefault("streams", {})
    if uri not in streams:
        h = ctypes.c_void_p()
        _check(load().hal_stream_create(_device(uri), None, ctypes.byref(h)))
        streams[uri] = h
    return streams[uri]


def _uri_of(obj):
    kind, index = (int(v) for v in obj.__dlpack_device__())
    if kind not in _DL_DEVICES:
        raise HalcyonError("HAL_UNSUPPORTED", f"DLPack device type {kind} has no halcyon backend")
    return f"{_DL_DEVICES[kind]}:{index}"


# ---- DLPack ----------------------------------------------------------------------------------

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype, _api.PyCapsule_GetPointer.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                                          ctypes.c_char_p]
_api.PyCapsule_SetName.restype, _api.PyCapsule_SetName.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype, _api.PyCapsule_IsValid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
# The destructor gets the capsule while it is being freed: a raw pointer, never a py_object
# (a new reference to a dying object would free it twice).
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_DLTENSOR, _USED = b"dltensor", b"used_dltensor"  # module-lifetime: capsules keep the pointers


class _Bits:
    """An array whose elements halcyon reads as `dtype` (an hrt_dtype name) of the same size."""
    dtype = None

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class bf16(_Bits):
    """Marks a 16-bit integer array (NumPy has no bfloat16) as bf16 bits for halcyon."""
    dtype = "bf16"


class e4m3(_Bits):
    """Marks an 8-bit array as e4m3 (OCP FP8, max 448) bits for halcyon: a NumPy uint8 array, or
    a torch.float8_e4m3fn tensor (passed as its uint8 view: DLPack before 1.0 has no FP8 type)."""
    dtype = "e4m3"

    def __init__(self, array):
        if type(array).__module__.startswith("torch") and str(array.dtype) == "torch.float8_e4m3fn":
            import torch
            array = array.view(torch.uint8)
        super().__init__(array)


def _base(obj):
    return obj.array if isinstance(obj, _Bits) else obj


def _is_torch_cuda(obj):
    """A torch GPU tensor: `is_cuda` holds for CUDA and, in a ROCm build of PyTorch, HIP tensors."""
    base = _base(obj)
    return type(base).__module__.startswith("torch") and bool(getattr(base, "is_cuda", False))


def _is_torch_xpu(obj):
    """A torch XPU tensor (Intel GPUs through SYCL; DLPack gives it as kDLOneAPI memory, ze:N)."""
    base = _base(obj)
    return type(base).__module__.startswith("torch") and bool(getattr(base, "is_xpu", False))


def _wait_for_producer(obj):
    """PyTorch's GPU work on a tensor runs on its current stream (an XPU tensor's: its SYCL
    queue, which halcyon does not import): let it finish first."""
    if _is_torch_cuda(obj):
        import torch
        torch.cuda.current_stream(_base(obj).device).synchronize()
    elif _is_torch_xpu(obj):
        import torch
        torch.xpu.current_stream(_base(obj).device).synchronize()


# The halcyon device kinds whose streams are PyTorch's: "cuda" (a CUstream) and "hip" (a ROCm
# PyTorch's torch.cuda streams are hipStream_t, and DLPack gives its tensors as kDLROCM memory).
_TORCH_STREAM_KINDS = ("cuda", "hip")


def _torch_stream(uri, objs):
    """PyTorch's current stream on `uri` (its CUstream or hipStream_t as an integer) when every
    tensor of the call is a torch GPU tensor and the device's backend can import it, else None."""
    if uri.partition(":")[0] not in _TORCH_STREAM_KINDS or not objs or not all(_is_torch_cuda(o) for o in objs):
        return None
    native = _torch_current_stream(uri)
    return native if _imports_streams(uri, native) else None


_stream_import = {}  # uri -> whether its backend imports a native stream (asked once a device)


def _imports_streams(uri, native):
    """Whether `uri` takes PyTorch's streams. A HIP runtime before ROCm 6 has no hipStreamGetDevice
    to check a stream's device with, and the backend then refuses the import (HAL_UNSUPPORTED):
    such calls wait for torch's stream on the host instead, as every call did before."""
    with _lock:
        known = _stream_import.get(uri)
    if known is None:
        h = ctypes.c_void_p()
        desc = _StreamImportDesc(ctypes.sizeof(_StreamImportDesc), None, native, 0, 0)
        err = load().hal_stream_import(_device(uri), ctypes.byref(desc), ctypes.byref(h))
        known = not (err and load().hal_error_status(err) == _HAL_UNSUPPORTED)
        if known:
            _check(err)
            _check(load().hal_stream_release(h))
        else:
            load().hal_error_free(err)
        with _lock:
            _stream_import[uri] = known
    return known


def _torch_current_stream(uri):
    import torch
    return int(torch.cuda.current_stream(int(uri.partition(":")[2] or 0)).cuda_stream)


# CUDA's legacy (0, PyTorch's default stream) and per-thread (2) default streams, and HIP's null
# stream (0) and hipStreamPerThread (2): never destroyed.
_LASTING = (0, 2)


def _import_stream(uri, native):
    h = ctypes.c_void_p()
    desc = _StreamImportDesc(ctypes.sizeof(_StreamImportDesc), None, native, 0, 0)
    _check(load().hal_stream_import(_device(uri), ctypes.byref(desc), ctypes.byref(h)))
    return h


class _Imported:
    """The hal buffers of one call's tensors, and the stream it runs on; released (and the
    producers' deleters called) when the call is done.

    native=None: the call runs on this thread's halcyon stream, after the producers' pending
    work (a host wait), and `finish` waits for it. native=<CUstream>: PyTorch's current stream,
    imported (hal_stream_import): the call is queued on it in order with torch's work, with no
    host wait before or after, and the buffers are imported HAL_BUFFER_IMPORT_OWNER_ORDERED
    (torch's caching allocator reuses a block only after the work queued on its stream)."""

    def __init__(self, uri, native=None):
        self.uri = _canonical(uri)
        self.native = native
        self.tensors = []
        self._stream = None  # the imported hal stream, when native is given

    def add(self, name, obj):
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"tensor '{name}': a {type(obj).__name__} has no __dlpack__ (a torch tensor or a "
                            f"NumPy array is expected)")
        uri = _canonical(_uri_of(obj))
        if uri != self.uri:
            raise HalcyonError("HAL_INVALID_ARGUMENT", f"tensor '{name}' is on {uri}, the call's device is {self.uri}")
        if self.native is None:
            _wait_for_producer(obj)
        capsule = obj.__dlpack__()
        managed = _api.PyCapsule_GetPointer(capsule, _DLTENSOR)
        t = _Tensor()
        override = _DTYPES.index(obj.dtype) if isinstance(obj, _Bits) else _FROM_DLPACK
        name_b = name.encode()
        flags = 0 if self.native is None else _OWNER_ORDERED
        _check(load().hrt_dlpack_import_flags(_device(self.uri), managed, name_b, override, flags, ctypes.byref(t)))
        _api.PyCapsule_SetName(capsule, _USED)  # the hal buffer owns it now; its release calls the deleter
        t.name = name_b  # the struct keeps the bytes alive
        self.tensors.append(t)
        return t

    def stream(self):
        """The hal stream to queue the call on."""
        if self.native is None:
            return _stream(self.uri)
        if self.native in _LASTING:  # imported once a thread: these streams are never destroyed
            kept = _local.__dict__.setdefault("imported", {})
            if (self.uri, self.native) not in kept:
                kept[(self.uri, self.native)] = _import_stream(self.uri, self.native)
            return kept[(self.uri, self.native)]
        if self._stream is None:  # any other stream may be destroyed by its owner: imported a call
            self._stream = _import_stream(self.uri, self.native)
        return self._stream

    def finish(self):
        """After the call is queued: wait for it on a halcyon stream; on torch's stream, nothing."""
        if self.native is None:
            _check(load().hal_stream_synchronize(_stream(self.uri)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        errors = [load().hal_buffer_release(t.buffer) for t in self.tensors]
        if self._stream is not None:  # neither waited for nor destroyed: torch's stream
            errors.append(load().hal_stream_release(self._stream))
        errors = [e for e in errors if e]
        for e in errors[1:]:  # every release was tried; the first error is raised, the rest freed
            load().hal_error_free(e)
        _check(errors[0] if errors else None)


def device_address(obj):
    """The device address halcyon uses for `obj`'s memory when it takes it (the hal buffer that
    wraps it): obj's own data pointer, since nothing is copied."""
    with _Imported(_uri_of(obj)) as imported:
        t = imported.add("tensor", obj)
        info = _BufferInfo()
        info.struct_size = ctypes.sizeof(_BufferInfo)
        _check(load().hal_buffer_get_info(t.buffer, ctypes.byref(info)))
        return info.device_address + t.offset


def _shape(t):
    return tuple(t.shape[i] for i in range(t.rank))


def _call_arguments(fn, op, arguments):
    """An operator call's keyword arguments as (tensors, params): tensors have __dlpack__,
    params are bool / int / float / str."""
    tensors = {k: v for k, v in arguments.items() if hasattr(v, "__dlpack__")}
    params = {k: v for k, v in arguments.items() if k not in tensors}
    for k, v in params.items():
        if not isinstance(v, (bool, int, float, str)):
            raise TypeError(f"halcyon.{fn}('{op}'): '{k}' is a {type(v).__name__}: a tensor needs __dlpack__ (a torch "
                            f"tensor or a NumPy array), a parameter is a bool, int, float or str")
    if not tensors:
        raise ValueError(f"halcyon.{fn}('{op}'): no tensor arguments")
    return tensors, params


def _c_arguments(imported, tensors, params):
    """The hrt_tensor and hrt_param arrays of a call (imported: an _Imported to take the tensors)."""
    for name, obj in tensors.items():
        imported.add(name, obj)
    arr = (_Tensor * len(imported.tensors))(*imported.tensors)
    keep = [(k.encode(), _text(v).encode()) for k, v in params.items()]
    pars = (_Param * max(len(keep), 1))()
    for i, (k, v) in enumerate(keep):
        pars[i] = _Param(ctypes.sizeof(_Param), None, k, v)
    pars._keep = keep  # the bytes the params point at, alive as long as the array
    return arr, pars, len(keep)


def run(op, device=None, *, impl=None, **arguments):
    """Runs operator `op`: tensors (inputs, and the outputs you allocated) and scalar params
    by their contract names. halcyon.run("vector_add", a=x, b=y, c=z). ``impl`` names the
    implementation ("sm90.tall", "host"; an unknown name's error lists them); None: the registry's
    choice."""
    tensors, params = _call_arguments("run", op, arguments)
    options = _call_options(impl)
    uri = _canonical(device or _uri_of(next(iter(tensors.values()))))
    with _Imported(uri, _torch_stream(uri, list(tensors.values()))) as imported:
        arr, pars, n = _c_arguments(imported, tensors, params)
        _check(load().hrt_run_op_with(_device(uri), imported.stream(), op.encode(), arr, len(arr), pars, n, options))
        imported.finish()


class Prepared:
    """One call of operator `op`, checked against its contract and its implementation chosen
    once (runtime.h's hrt_op_create), then run as often as asked with ``p()``: each run reads and
    writes the tensors' memory as it is then. For a loop that repeats one call on fixed buffers
    whose contents change (a server's decode step over preallocated caches, with the block table
    and lengths rewritten in place): a run repeats no check, no choice and no DLPack import, so
    what it costs on the host is the implementation's launch work. Shapes, dtypes and params are
    those given here; the tensors' memory is held until ``close()``. Streams as ``run``: when
    every tensor is a torch GPU tensor (CUDA, or HIP under ROCm) a run is queued on torch's
    current stream at that moment, without a host wait; otherwise on a halcyon stream after the
    producers' pending work, and waited for. ``impl`` names the implementation chosen; given to
    the constructor, it names the one to take (as in ``run``)."""

    def __init__(self, op, device=None, *, impl=None, **arguments):
        tensors, params = _call_arguments("prepare", op, arguments)
        options = _call_options(impl)
        self.uri = _canonical(device or _uri_of(next(iter(tensors.values()))))
        self._objs = list(tensors.values())
        native = _torch_stream(self.uri, self._objs)
        self._native = native is not None
        self._op = ctypes.c_void_p()
        # The op takes its own references on the buffers (whose release returns the memory to its
        # producer), so the import's may go when the context closes.
        with _Imported(self.uri, native) as imported:
            arr, pars, n = _c_arguments(imported, tensors, params)
            _check(load().hrt_op_create_with(_device(self.uri), op.encode(), arr, len(arr), pars, n, options,
                                             ctypes.byref(self._op)))
        self.op = op
        self.impl = load().hrt_op_impl_name(self._op).decode()

    def __call__(self):
        if not self._op:
            raise HalcyonError("HAL_INVALID_HANDLE", f"Prepared '{self.op}': called after close()")
        if self._native:  # torch's current stream now (imported once a thread for its default streams)
            with _Imported(self.uri, _torch_current_stream(self.uri)) as imported:
                _check(load().hrt_op_run(self._op, imported.stream()))
            return
        for obj in self._objs:
            _wait_for_producer(obj)
        stream = _stream(self.uri)
        _check(load().hrt_op_run(self._op, stream))
        _check(load().hal_stream_synchronize(stream))

    def close(self):
        """Releases the op (and its references on the tensors' memory)."""
        if self._op:
            load().hrt_op_release(self._op)
            self._op = ctypes.c_void_p()

    def __del__(self):
        if getattr(self, "_op", None):
            self.close()


def prepare(op, device=None, *, impl=None, **arguments):
    """``halcyon.Prepared(op, device, impl=impl, **arguments)``: a call checked once and run by ``p()``.

        step = halcyon.prepare("attention_decode", q=q, k_cache=k, v_cache=v, block_table=table,
                               seq_lens=lens, out=out, lse=lse, scale=0.0)
        for _ in range(tokens): ...; step()   # table, lens, q rewritten in place between steps"""
    return Prepared(op, device, impl=impl, **arguments)


def _text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _empty_like(x):
    if isinstance(x, _Bits):
        return type(x)(_empty_like(x.array))
    module = type(x).__module__
    if module.startswith("torch"):
        import torch
        return torch.empty_like(x)
    if module.startswith("numpy"):
        import numpy
        return numpy.empty_like(x)
    raise TypeError(f"moe_layer: pass out= for a {type(x).__name__}")


class MoeLayer:
    """The MoE layer (DeepSeek-V3 style; halcyon::rt::MoeLayer, through runtime.h), created once
    for many calls: ``layer(x)`` maps x [T, H] bf16 to [T, H] bf16 (``out=`` to write into yours).

    w_router [H, E] bf16, bias [E] f32 (selection only) or None; bf16 experts w_gate_up
    [EL, H, 2I] (gate columns first) and w_down [EL, I, H]; and/or FP8 experts, ``fp8=`` a dict
    of w_gate_up [EL, 2I, H] and w_down [EL, H, I] e4m3 (``halcyon.e4m3``-marked, uint8 or
    torch.float8_e4m3fn) with their 128x128-block scales w_gate_up_scale [EL, ceil(2I/128),
    ceil(H/128)] and w_down_scale [EL, ceil(H/128), ceil(I/128)] f32. With FP8 weights the layer
    runs FP8 experts where the device can (``fp8_experts``), else the bf16 ones; without those,
    ``fp8_fallback="dequantize"`` dequantizes the FP8 weights to bf16 once, here, and runs them
    (``fp8_dequantized``; more device memory, the bf16 experts' speed), else it raises the reason.
    ``impl=`` names implementations of the layer's operators, {"moe_grouped_gemm_fp8": "sm90.tall"}
    (as ``run(impl=)``; an unknown or unfitting name raises). EL < E (expert parallelism) needs
    experts=E and expert_begin. The layer holds the weights' memory (no copy) until ``close()``."""

    def __init__(self, w_router, w_gate_up=None, w_down=None, bias=None, *, fp8=None, topk=8, n_groups=8,
                 topk_groups=4, score="sigmoid", normalize=True, routed_scale=2.5, expert_begin=0, experts=None,
                 fp8_fallback="fail", impl=None):
        if score not in ("sigmoid", "softmax"):
            raise ValueError(f"MoeLayer: score must be 'sigmoid' or 'softmax', not {score!r}")
        if fp8_fallback not in ("fail", "dequantize"):
            raise ValueError(f"MoeLayer: fp8_fallback must be 'fail' or 'dequantize', not {fp8_fallback!r}")
        if (w_gate_up is None) != (w_down is None):
            raise ValueError("MoeLayer: give both bf16 expert weights (w_gate_up and w_down) or neither")
        if w_gate_up is None and fp8 is None:
            raise ValueError("MoeLayer: no expert weights (bf16 w_gate_up / w_down, or fp8=)")
        impl = dict(impl or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in impl.items()):
            raise TypeError("MoeLayer: impl maps operator names to implementation names, both str")
        if fp8 is not None and set(fp8) != set(_FP8_PARTS):
            raise ValueError(f"MoeLayer: fp8 takes exactly {', '.join(_FP8_PARTS)}; got {', '.join(sorted(fp8))}")
        self.uri = _uri_of(w_router)
        self._layer = ctypes.c_void_p()
        named = {"w_router": w_router}
        if bias is not None:
            named["bias"] = bias
        if w_gate_up is not None:
            named.update(w_gate_up=w_gate_up, w_down=w_down)
        for part, obj in (fp8 or {}).items():
            e8 = part in ("w_gate_up", "w_down") and not isinstance(obj, _Bits)
            named["fp8." + part] = e4m3(obj) if e8 else obj
        with _Imported(self.uri) as imported:
            t = {name: imported.add(name, obj) for name, obj in named.items()}
            want = {"bias": "f32", "fp8.w_gate_up": "e4m3", "fp8.w_down": "e4m3", "fp8.w_gate_up_scale": "f32",
                    "fp8.w_down_scale": "f32"}
            for name, tensor in t.items():
                if _DTYPES[tensor.dtype] != want.get(name, "bf16"):
                    raise HalcyonError("HAL_INVALID_ARGUMENT", f"MoeLayer: '{name}' is {_DTYPES[tensor.dtype]}, "
                                                               f"{want.get(name, 'bf16')} is expected")
            H, E = _shape(t["w_router"])
            if "w_gate_up" in t:
                EL, _, I2 = _shape(t["w_gate_up"])
            else:
                EL, I2, _ = _shape(t["fp8.w_gate_up"])
            I = I2 // 2
            E = experts or E
            g = lambda n: -(-n // 128)  # noqa: E731
            shapes = {"w_router": (H, E), "bias": (E,), "w_gate_up": (EL, H, 2 * I), "w_down": (EL, I, H),
                      "fp8.w_gate_up": (EL, 2 * I, H), "fp8.w_gate_up_scale": (EL, g(2 * I), g(H)),
                      "fp8.w_down": (EL, H, I), "fp8.w_down_scale": (EL, g(H), g(I))}
            for name in t:
                if _shape(t[name]) != shapes[name]:
                    raise HalcyonError("HAL_INVALID_ARGUMENT", f"MoeLayer: '{name}' has shape {list(_shape(t[name]))}, "
                                                               f"{list(shapes[name])} is expected (hidden {H}, inter {I}, "
                                                               f"{EL} local experts)")
            # The desc's extension chain (runtime.h: each struct's `next` the address of the one
            # after it). `chain` keeps every struct and array alive through the create call.
            chain = []
            if impl:
                entries = (_OpImpl * len(impl))(*(_OpImpl(k.encode(), v.encode()) for k, v in impl.items()))
                chain += [entries, _MoeImpls(ctypes.sizeof(_MoeImpls), None, _EXT_MOE_LAYER_IMPLS, len(impl), entries)]
            if fp8 is not None:
                chain.append(_MoeFp8(ctypes.sizeof(_MoeFp8), ctypes.addressof(chain[-1]) if chain else None,
                                     _EXT_MOE_FP8_WEIGHTS, *(t["fp8." + part].buffer for part in _FP8_PARTS),
                                     fp8_fallback == "dequantize"))
            buf = lambda name: t[name].buffer if name in t else None  # noqa: E731
            desc = _MoeDesc(ctypes.sizeof(_MoeDesc), ctypes.addressof(chain[-1]) if chain else None,
                            H, I, E, topk, n_groups, topk_groups, expert_begin, EL if EL != E else -1,
                            score == "softmax", bool(normalize), routed_scale, buf("w_router"), buf("bias"),
                            buf("w_gate_up"), buf("w_down"))
            # The layer takes its own references on the weights' buffers (whose release returns the
            # memory to its producer), so this call's may go when the import context closes.
            _check(load().hrt_moe_layer_create(_device(self.uri), ctypes.byref(desc), ctypes.byref(self._layer)))
        self.hidden = H
        info = _MoeInfo()
        info.struct_size = ctypes.sizeof(_MoeInfo)
        _check(load().hrt_moe_layer_get_info(self._layer, ctypes.byref(info)))
        self.fp8_experts, self.gathers_rows = bool(info.fp8_experts), bool(info.gather)
        self.fp8_dequantized = bool(info.fp8_dequantized)

    def __call__(self, x, out=None):
        if not self._layer:
            raise HalcyonError("HAL_INVALID_HANDLE", "MoeLayer: called after close()")
        out = _empty_like(x) if out is None else out
        with _Imported(self.uri, _torch_stream(self.uri, [x, out])) as imported:
            tx, to = imported.add("x", x), imported.add("out", out)
            for name, tensor in (("x", tx), ("out", to)):
                if _DTYPES[tensor.dtype] != "bf16":
                    raise HalcyonError("HAL_INVALID_ARGUMENT", f"MoeLayer: '{name}' is {_DTYPES[tensor.dtype]}, bf16 "
                                                               f"is expected")
            T = _shape(tx)[0] if tx.rank == 2 else -1
            for name, tensor in (("x", tx), ("out", to)):
                if _shape(tensor) != (T, self.hidden):
                    raise HalcyonError("HAL_INVALID_ARGUMENT", f"MoeLayer: '{name}' has shape {list(_shape(tensor))}, "
                                                               f"[T, {self.hidden}] is expected (x is {list(_shape(tx))})")
            _check(load().hrt_moe_layer_forward(self._layer, imported.stream(), tx.buffer, to.buffer, T))
            imported.finish()
        return out

    def close(self):
        """Destroys the layer (its workspace and its references on the weights)."""
        if self._layer:
            load().hrt_moe_layer_destroy(self._layer)
            self._layer = ctypes.c_void_p()

    def __del__(self):
        if getattr(self, "_layer", None):
            self.close()


def moe_layer(x, w_router, w_gate_up=None, w_down=None, bias=None, out=None, *, fp8=None, topk=8, n_groups=8,
              topk_groups=4, score="sigmoid", normalize=True, routed_scale=2.5, expert_begin=0, experts=None):
    """One call of the MoE layer (MoeLayer, created and destroyed around it): x [T, H] bf16 ->
    out [T, H] bf16. Arguments as MoeLayer's; for many calls create a MoeLayer once."""
    layer = MoeLayer(w_router, w_gate_up, w_down, bias, fp8=fp8, topk=topk, n_groups=n_groups,
                     topk_groups=topk_groups, score=score, normalize=normalize, routed_scale=routed_scale,
                     expert_begin=expert_begin, experts=experts)
    try:
        return layer(x, out)
    finally:
        layer.close()


# ---- export: memory halcyon allocated, seen by NumPy / PyTorch -------------------------------

class empty:
    """A new halcyon tensor on `device` ("cpu:0", "cuda:0"): shape, dtype (one of f32 f16 bf16
    i32 i64 u8 f64). numpy.from_dlpack / torch.from_dlpack view it without a copy (through
    hrt_dlpack_export); the memory lives while any of them does."""

    def __init__(self, shape, dtype="f32", device="cpu:0"):
        sizes = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "u8": 1, "f64": 8}
        if dtype not in sizes or len(shape) > _MAX_RANK:
            raise ValueError(f"halcyon.empty: dtype {dtype!r} or rank {len(shape)} not supported")
        self.device = _canonical(device)
        self.shape, self.dtype = tuple(int(d) for d in shape), dtype
        self._buffer = _allocate(_device(self.device), _byte_size(self.shape, sizes[dtype]))

    def __dlpack_device__(self):
        kind = {v: k for k, v in _DL_DEVICES.items()}[self.device.split(":")[0]]
        return (kind, int(self.device.split(":")[1]) if ":" in self.device else 0)

    def __dlpack__(self, stream=None):
        t = _Tensor(ctypes.sizeof(_Tensor), None, b"empty", self._buffer, 0, _DTYPES.index(self.dtype),
                    len(self.shape), (ctypes.c_int64 * _MAX_RANK)(*self.shape))
        managed = ctypes.c_void_p()
        _release_exports()
        _check(load().hrt_dlpack_export(_device(self.device), ctypes.byref(t), ctypes.byref(managed)))
        capsule = _api.PyCapsule_New(managed, _DLTENSOR, _capsule_destructor)
        with _exports_lock:
            _exports.append(capsule)
        return capsule

    def __del__(self):
        if getattr(self, "_buffer", None) and _lib is not None:
            _lib.hal_error_free(_lib.hal_buffer_release(self._buffer))
        _release_exports()  # those this tensor's consumers refused or dropped unconsumed


_INT64_MAX = (1 << 63) - 1


def _byte_size(shape, element_size):
    """The bytes of a tensor of `shape`, refused where a dimension is negative or the size (or a
    dimension) passes int64: the buffer's size is a uint64 and DLPack's shape int64, which ctypes
    would wrap without a word (a 0-byte buffer exported as 2^67 bytes)."""
    size = element_size
    for d in shape:
        if d < 0:
            raise ValueError(f"halcyon.empty: shape {shape} has a negative dimension ({d})")
        if d > _INT64_MAX:
            raise ValueError(f"halcyon.empty: shape {shape} has a dimension past 2^63-1 ({d})")
        size *= d
    if size > _INT64_MAX:
        raise ValueError(f"halcyon.empty: shape {shape} of {element_size}-byte elements is {size} bytes, "
                         f"past 2^63-1")
    return size


def _allocate(device, size):
    h = ctypes.c_void_p()
    _check(load().hal_buffer_create(device, ctypes.byref(_BufferDesc(ctypes.sizeof(_BufferDesc), None, 0, 0, size, 0)), ctypes.byref(h)))
    return h


# Every capsule __dlpack__ handed out, held here until nothing else holds it. A consumer that
# refuses a capsule (NumPy: "Unsupported dtype") drops it with its exception pending, and a
# ctypes callback cannot run as a capsule destructor then: its first call raises (so the deleter
# never ran and the export leaked), and nothing it does can leave the exception set on return
# (CPython turns it into a SystemError and prints that as unraisable, so the consumer returned
# NULL without an error). Holding each capsule moves its last release here, to ordinary code
# with no exception pending, and the consumer's error reaches its caller.
_exports = []
_exports_lock = threading.Lock()


def _refs(objs, i):
    return sys.getrefcount(objs[i])


_ONLY_LISTED = _refs([object()], 0)  # what _refs gives for an object that only its list holds


def _release_exports():
    """Lets go of the exported capsules only _exports holds (their destructor deletes those never
    consumed). Skipped while a release runs (a __del__ it set off, or another thread's): the next
    export or tensor release takes them."""
    if not _exports_lock.acquire(blocking=False):
        return
    try:
        _exports[:] = [_exports[i] for i in range(len(_exports)) if _refs(_exports, i) > _ONLY_LISTED]
    finally:
        _exports_lock.release()


atexit.register(_release_exports)  # while the module can still run the destructors


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # Only from _release_exports: no exception is pending (see _exports).
    # An unconsumed capsule still owns its DLManagedTensor (DLPack's rule): delete it.
    if _raw_is_valid(capsule, _DLTENSOR):
        managed = _DLManaged.from_address(_raw_get_pointer(capsule, _DLTENSOR))
        if managed.deleter:
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(managed.deleter)(ctypes.addressof(managed))
