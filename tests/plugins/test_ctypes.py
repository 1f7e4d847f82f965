#!/usr/bin/env python3
"""libhalcyon from Python through ctypes, which opens libraries RTLD_LOCAL: every backend is a
plugin file (the CPU backend named in hal_init_desc.backend_path, amdgpu-sim found in the plugin
folder beside libhalcyon), and each does real work: allocate, write, copy, launch, read.

usage: test_ctypes.py LIBHALCYON CPU_PLUGIN [SIM_PLUGIN_FOLDER SIM_CODE_OBJECT]
"""
import ctypes as C
import struct
import sys

HAL_INIT_NO_BUILTIN_BACKENDS, HAL_INIT_NO_ENV_PATH = 1, 2
HAL_BACKEND_AVAILABLE = 0
HAL_MEMORY_DEVICE = 0
HAL_MODULE_HSACO, HAL_MODULE_HOST = 3, 5
HAL_ARG_VALUE, HAL_ARG_POINTER = 0, 1


def sized(cls):
    """A struct whose struct_size is filled in."""
    s = cls()
    s.struct_size = C.sizeof(cls)
    return s


class InitDesc(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("next", C.c_void_p), ("flags", C.c_uint32),
                ("backend_path", C.c_char_p)]


class BackendRecord(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("next", C.c_void_p), ("name", C.c_char * 32),
                ("source", C.c_char * 512), ("state", C.c_uint32), ("reason", C.c_char * 512),
                ("device_count", C.c_uint32), ("abi_major", C.c_uint32), ("abi_minor", C.c_uint32)]


class BufferDesc(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("next", C.c_void_p), ("kind", C.c_uint32),
                ("flags", C.c_uint32), ("size", C.c_uint64), ("alignment", C.c_uint64)]


class BufferInfo(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("next", C.c_void_p), ("kind", C.c_uint32),
                ("reserved0", C.c_uint32), ("size", C.c_uint64), ("device_address", C.c_uint64),
                ("host_pointer", C.c_void_p)]


class ModuleDesc(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("next", C.c_void_p), ("format", C.c_uint32),
                ("flags", C.c_uint32), ("target", C.c_char_p), ("data", C.c_void_p),
                ("size", C.c_size_t), ("name", C.c_char_p)]


class LaunchDesc(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("next", C.c_void_p), ("grid", C.c_uint32 * 3),
                ("block", C.c_uint32 * 3), ("shared_bytes", C.c_uint32), ("reserved0", C.c_uint32),
                ("args", C.c_void_p), ("args_size", C.c_size_t)]


class KernelArg(C.Structure):
    _fields_ = [("offset", C.c_uint32), ("size", C.c_uint32), ("kind", C.c_uint32)]


class HostLaunchCtx(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("grid", C.c_uint32 * 3), ("block", C.c_uint32 * 3),
                ("block_id", C.c_uint32 * 3), ("shared_bytes", C.c_uint32), ("shared", C.c_void_p)]


HostKernelFn = C.CFUNCTYPE(None, C.POINTER(HostLaunchCtx), C.c_void_p)


class HostKernelEntry(C.Structure):
    _fields_ = [("name", C.c_char_p), ("fn", HostKernelFn), ("arg_count", C.c_uint32),
                ("args", C.POINTER(KernelArg)), ("args_size", C.c_uint32)]


class HostModuleImage(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("next", C.c_void_p), ("kernel_count", C.c_uint32),
                ("kernels", C.POINTER(HostKernelEntry))]


class Hal:
    def __init__(self, path):
        self.lib = C.CDLL(path)  # ctypes' default mode: RTLD_LOCAL
        for name in ["hal_init", "hal_registry_count", "hal_registry_record", "hal_device_open",
                     "hal_device_release", "hal_buffer_create", "hal_buffer_release", "hal_buffer_get_info",
                     "hal_stream_create", "hal_stream_release", "hal_stream_write", "hal_stream_read",
                     "hal_stream_copy", "hal_stream_synchronize", "hal_module_load", "hal_module_release",
                     "hal_module_get_kernel", "hal_kernel_release", "hal_stream_launch"]:
            getattr(self.lib, name).restype = C.c_void_p  # hal_error*
        self.lib.hal_error_message.restype = C.c_char_p
        self.lib.hal_error_message.argtypes = [C.c_void_p]
        self.lib.hal_error_free.argtypes = [C.c_void_p]
        self.lib.hal_stream_write.argtypes = [C.c_void_p, C.c_void_p, C.c_uint64, C.c_void_p, C.c_uint64]
        self.lib.hal_stream_read.argtypes = [C.c_void_p, C.c_void_p, C.c_uint64, C.c_void_p, C.c_uint64]
        self.lib.hal_stream_copy.argtypes = [C.c_void_p, C.c_void_p, C.c_uint64, C.c_void_p, C.c_uint64, C.c_uint64]
        self.lib.hal_registry_record.argtypes = [C.c_uint32, C.c_void_p]

    def __getattr__(self, name):
        fn = getattr(self.lib, "hal_" + name)

        def call(*args):
            e = fn(*args)
            if e:
                msg = self.lib.hal_error_message(e).decode()
                self.lib.hal_error_free(e)
                raise RuntimeError(f"hal_{name}: {msg}")
        return call

    def records(self):
        n = C.c_uint32()
        self.registry_count(C.byref(n))
        out = []
        for i in range(n.value):
            r = sized(BackendRecord)
            self.registry_record(i, C.byref(r))
            out.append(r)
        return out

    def handle(self, fn, *args):
        h = C.c_void_p()
        fn(*args, C.byref(h))
        return h

    def alloc(self, dev, size):
        d = sized(BufferDesc)
        d.kind, d.size = HAL_MEMORY_DEVICE, size
        return self.handle(self.buffer_create, dev, C.byref(d))

    def address(self, buf):
        i = sized(BufferInfo)
        self.buffer_get_info(buf, C.byref(i))
        return i.device_address

    def launch(self, stream, kernel, grid, block, blob):
        ld = sized(LaunchDesc)
        ld.grid[:] = [grid, 1, 1]
        ld.block[:] = [block, 1, 1]
        arg = C.create_string_buffer(blob, len(blob))  # hal_stream_launch copies the blob
        ld.args, ld.args_size = C.cast(arg, C.c_void_p), len(blob)
        self.stream_launch(stream, kernel, C.byref(ld))


def floats(values):
    return (C.c_float * len(values))(*values)


def record(hal, name):
    for r in hal.records():
        if r.name.decode() == name:
            return r
    raise AssertionError(f"no record of backend {name}: " +
                         "; ".join(f"{r.name.decode()} from {r.source.decode()}: {r.reason.decode()}" for r in hal.records()))


def run_cpu(hal, cpu_plugin):
    r = record(hal, "cpu")
    assert r.state == HAL_BACKEND_AVAILABLE, r.reason.decode()
    assert r.source.decode() == cpu_plugin, f"cpu came from {r.source.decode()}"
    dev = hal.handle(hal.device_open, b"cpu")
    s = hal.handle(hal.stream_create, dev, None)
    n = 100
    x, y = [float(i) for i in range(n)], [1.0 - i for i in range(n)]
    bx, by, tmp = hal.alloc(dev, 4 * n), hal.alloc(dev, 4 * n), hal.alloc(dev, 4 * n)
    hx, hy = floats(x), floats(y)  # host memory of stream-ordered writes: alive until synchronize
    hal.stream_write(s, bx, 0, hx, 4 * n)
    hal.stream_write(s, tmp, 0, hy, 4 * n)
    hal.stream_copy(s, by, 0, tmp, 0, 4 * n)

    def axpy(ctx, blob):  # y = 2x + y over one block of 32 elements; runs on the backend's threads
        xa, ya, count = struct.unpack("QQI", C.string_at(blob, 20))
        xs = C.cast(xa, C.POINTER(C.c_float))
        ys = C.cast(ya, C.POINTER(C.c_float))
        b = ctx.contents.block_id[0]
        for i in range(b * 32, min(count, (b + 1) * 32)):
            ys[i] = 2 * xs[i] + ys[i]

    fn = HostKernelFn(axpy)
    args = (KernelArg * 3)(KernelArg(0, 8, HAL_ARG_POINTER), KernelArg(8, 8, HAL_ARG_POINTER),
                           KernelArg(16, 4, HAL_ARG_VALUE))
    entry = HostKernelEntry(b"axpy", fn, 3, args, 24)
    image = sized(HostModuleImage)
    image.kernel_count, image.kernels = 1, C.pointer(entry)
    md = sized(ModuleDesc)
    md.format, md.target, md.name = HAL_MODULE_HOST, b"host", b"ctypes_test"
    md.data, md.size = C.cast(C.pointer(image), C.c_void_p), C.sizeof(image)
    mod = hal.handle(hal.module_load, dev, C.byref(md))
    k = hal.handle(hal.module_get_kernel, mod, b"axpy")
    hal.launch(s, k, (n + 31) // 32, 1, struct.pack("QQI4x", hal.address(bx), hal.address(by), n))
    out = floats([-1.0] * n)
    hal.stream_read(s, by, 0, out, 4 * n)
    hal.stream_synchronize(s)
    want = [2 * a + b for a, b in zip(x, y)]
    assert list(out) == want, f"cpu axpy: got {list(out)[:4]}..., expected {want[:4]}..."
    for obj, release in [(k, hal.kernel_release), (mod, hal.module_release), (bx, hal.buffer_release),
                         (by, hal.buffer_release), (tmp, hal.buffer_release), (s, hal.stream_release),
                         (dev, hal.device_release)]:
        release(obj)
    print(f"cpu (plugin {cpu_plugin}): allocate, write, copy, host-kernel launch (a Python function), read: ok")


def run_sim(hal, folder, code_object):
    r = record(hal, "amdgpu-sim")
    assert r.state == HAL_BACKEND_AVAILABLE, r.reason.decode()
    assert r.source.decode().startswith(folder), f"amdgpu-sim came from {r.source.decode()}, not {folder}"
    dev = hal.handle(hal.device_open, b"amdgpu-sim:gfx942")
    s = hal.handle(hal.stream_create, dev, None)
    n = 300
    a, b = [0.5 * i for i in range(n)], [3.0 - i for i in range(n)]
    ba, bb, bc, tmp = (hal.alloc(dev, 4 * n) for _ in range(4))
    ha, hb = floats(a), floats(b)  # alive until synchronize
    hal.stream_write(s, ba, 0, ha, 4 * n)
    hal.stream_write(s, tmp, 0, hb, 4 * n)
    hal.stream_copy(s, bb, 0, tmp, 0, 4 * n)
    with open(code_object, "rb") as f:
        co = f.read()
    data = C.create_string_buffer(co, len(co))
    md = sized(ModuleDesc)
    md.format, md.target, md.name = HAL_MODULE_HSACO, b"gfx942", b"halcyon_vector_add_f32.gfx942.hsaco"
    md.data, md.size = C.cast(data, C.c_void_p), len(co)
    mod = hal.handle(hal.module_load, dev, C.byref(md))
    k = hal.handle(hal.module_get_kernel, mod, b"halcyon_vector_add_f32")
    hal.launch(s, k, (n + 255) // 256, 256, struct.pack("QQQI", hal.address(ba), hal.address(bb), hal.address(bc), n))
    out = floats([-1.0] * n)
    hal.stream_read(s, bc, 0, out, 4 * n)
    hal.stream_synchronize(s)
    want = [x + y for x, y in zip(a, b)]
    assert list(out) == want, f"amdgpu-sim vector_add: got {list(out)[:4]}..., expected {want[:4]}..."
    for obj, release in [(k, hal.kernel_release), (mod, hal.module_release), (ba, hal.buffer_release),
                         (bb, hal.buffer_release), (bc, hal.buffer_release), (tmp, hal.buffer_release),
                         (s, hal.stream_release), (dev, hal.device_release)]:
        release(obj)
    print(f"amdgpu-sim (plugin folder {folder}): allocate, write, copy, code-object launch, read: ok")


def main(argv):
    if len(argv) not in (3, 5):
        print(__doc__, file=sys.stderr)
        return 2
    hal = Hal(argv[1])
    desc = sized(InitDesc)
    desc.flags = HAL_INIT_NO_BUILTIN_BACKENDS | HAL_INIT_NO_ENV_PATH  # every backend from a plugin file
    desc.backend_path = argv[2].encode()
    hal.init(C.byref(desc))
    run_cpu(hal, argv[2])
    if len(argv) == 5:
        run_sim(hal, argv[3], argv[4])
    print("ctypes (RTLD_LOCAL): every backend loaded as a plugin works")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
