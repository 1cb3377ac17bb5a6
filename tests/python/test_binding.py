#!/usr/bin/env python3
"""test_binding.py: examples/python/ocellus.py over the libocellus.so this build made (tests/test_python.sh
runs it from the repository root). Prints PASS/FAIL lines as tests/run.sh counts."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.getcwd(), "examples", "python"))
import ocellus  # noqa: E402

TEXT, MMPROJ = "examples/demo/ocellus-demo.gguf", "examples/demo/ocellus-demo-mmproj.gguf"
IMAGE = "examples/demo/shapes.ppm"
Q = "What color is the circle in image 1?"
failed = False


def report(name, ok, why=""):
    global failed
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)), flush=True)
    failed = failed or not ok


def read_ppm(path):
    """shapes.ppm as an H x W x 3 buffer (a memoryview with that shape: no numpy needed)."""
    data = open(path, "rb").read()
    parts, pos = [], 0
    while len(parts) < 4:   # magic, width, height, maxval, separated by whitespace
        while data[pos:pos + 1].isspace():
            pos += 1
        start = pos
        while not data[pos:pos + 1].isspace():
            pos += 1
        parts.append(data[start:pos])
    w, h = int(parts[1]), int(parts[2])
    pixels = bytearray(data[pos + 1:pos + 1 + w * h * 3])
    return memoryview(pixels).cast("B", shape=[h, w, 3])


def main():
    alloc = ocellus.CountingAllocator()
    model = ocellus.Model(TEXT, MMPROJ, allocator=alloc)
    ctx = model.context(n_threads=2, max_context_tokens=1024, max_image_tokens=256)
    a = ctx.ask(Q, images=[IMAGE], max_tokens=8)
    report("python_green_from_path", a == "green", repr(a))
    a = ctx.ask(Q, images=[open(IMAGE, "rb").read()], max_tokens=8)
    report("python_green_from_bytes", a == "green", repr(a))
    a = ctx.ask(Q, images=[read_ppm(IMAGE)], max_tokens=8)
    report("python_green_from_buffer", a == "green", repr(a))
    try:
        import numpy as np
        arr = np.frombuffer(bytes(read_ppm(IMAGE)), dtype=np.uint8).reshape(112, 112, 3)
        a = ctx.ask(Q, images=[arr], max_tokens=8)
        report("python_green_from_numpy", a == "green", repr(a))
    except ImportError:
        print("SKIP python_green_from_numpy: numpy is not installed")
    pieces = list(ctx.ask(Q, images=[IMAGE], stream=True))
    report("python_stream", "".join(pieces) == "green" and len(pieces) >= 1, repr(pieces))
    # stopping a stream early ends the answer and leaves the context usable
    gen = ctx.ask("Describe image 1.", images=[IMAGE], max_tokens=64, stream=True)
    first = next(gen, None)
    gen.close()
    a = ctx.ask(Q, images=[IMAGE])
    report("python_stream_closed_early", first is not None and a == "green", repr((first, a)))
    s = ctx.stats()
    report("python_stats", s.n_images == 1 and s.n_prompt_tokens > 0 and s.n_generated >= 1 and s.ttft_ms > 0
           and s.context_bytes > 0, repr(s))
    try:
        ctx.ask(Q, images=["examples/demo/no-such-image.ppm"])
        report("python_missing_file_raises", False, "no exception")
    except ocellus.Error as e:
        report("python_missing_file_raises", "no-such-image.ppm" in str(e) and e.status_name, "%s (%s)" % (e, e.status_name))
    try:
        ctx.ask(Q, images=[b"not an image"])
        report("python_bad_bytes_raise", False, "no exception")
    except ocellus.Error as e:
        report("python_bad_bytes_raise", e.status != 0, str(e))
    try:
        ocellus.Model("examples/demo/missing.gguf", allocator=alloc)
        report("python_missing_model_raises", False, "no exception")
    except ocellus.Error as e:
        report("python_missing_model_raises", "missing.gguf" in str(e), str(e))
    live_before_close = alloc.live_bytes
    model.close()
    report("python_frees_everything", alloc.live_bytes == 0 and alloc.live_blocks == 0 and live_before_close > 0,
           "%d bytes in %d blocks still live after close (%d before)" % (alloc.live_bytes, alloc.live_blocks, live_before_close))
    print("# allocator: peak %.1f MiB, %d calls" % (alloc.peak_bytes / 1048576, alloc.calls))
    # the five-line demo of docs/python.md, as a user would run it
    demo = ("import ocellus\n"
            "model = ocellus.Model('%s', '%s')\n"
            "ctx = model.context(n_threads=2)\n"
            "print(ctx.ask('%s', images=['%s']))\n" % (TEXT, MMPROJ, Q, IMAGE))
    out = subprocess.run([sys.executable, "-c", demo], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH="examples/python"))
    report("python_five_line_demo", out.returncode == 0 and out.stdout.strip() == "green", out.stdout + out.stderr)
    sys.exit(1 if failed else 0)


main()
