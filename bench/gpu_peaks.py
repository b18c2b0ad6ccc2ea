"""The GPU's two ceilings, measured as scripts/gpu_check.sh runs: device
memory bandwidth (a device-to-device copy of 2 GiB, bytes read plus bytes
written) and the tensor cores' F16 peak (an 8192^3 product of random F16
matrices with fp32 accumulation). Median of 10 timed runs after 3 warm-ups,
timed with CUDA events. Uses the PyTorch that GPU machines carry; clade does
not depend on it. Prints one CSV row: gpu,hbm_gb_s,f16_tflop_s."""
import sys

import torch


def timed(fn, reps=10, warm=3):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    dev = torch.device("cuda")
    n = (2 << 30) // 4
    src = torch.rand(n, device=dev)
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src))
    hbm = 2 * n * 4 / t
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    k = 8192
    a = torch.randn(k, k, device=dev, dtype=torch.float16)
    b = torch.randn(k, k, device=dev, dtype=torch.float16)
    t = timed(lambda: torch.mm(a, b))
    flops = 2 * k ** 3 / t
    print("gpu,hbm_gb_s,f16_tflop_s")
    print('"%s",%.0f,%.0f' % (torch.cuda.get_device_name(0), hbm / 1e9, flops / 1e12))
    return 0


if __name__ == "__main__":
    sys.exit(main())
