/*
 * torchlike.c: libtorchlike.so, a stand-in for the native half of a PyTorch launch stack,
 * for the GPU loss-rate workload (gpu_deep.py) and benchmark (bench/gpu_rate.sh). An
 * operator call from Python enters torchlike_launch(op, kernel), goes through one of four
 * operator frames and twenty nested dispatch frames (as an at:: call goes through the
 * dispatcher, autograd and the native kernel's launcher) and launches the kernel with
 * cudaLaunchKernel of the runtime it links. Built as libtorch is (gcc -O2, no frame
 * pointers; each frame kept by noinline/noclone and work after its call, no tail call),
 * so only the unwind tables (.eh_frame) walk these frames.
 */
#include <cuda_runtime_api.h>

#define TL_FRAME __attribute__((noinline, noclone, visibility("default")))

/* What every frame passes down; the counter after each call keeps it a real frame. */
struct tl_call {
	const void *kernel;
	void **args;
	unsigned depth;
	int err;
};

TL_FRAME int tl_launch_kernel(struct tl_call *c)
{
	dim3 grid = {64, 1, 1}, block = {128, 1, 1};

	c->err = cudaLaunchKernel(c->kernel, grid, block, c->args, 0, NULL);
	c->depth++;
	return c->err;
}

#define TL_LEVEL(n, next)                                                                          \
	TL_FRAME int tl_dispatch_##n(struct tl_call *c)                                            \
	{                                                                                          \
		volatile unsigned pad = c->depth;                                                  \
		int r = next(c);                                                                   \
		c->depth += pad & 1;                                                               \
		return r;                                                                          \
	}

TL_LEVEL(00, tl_launch_kernel)
TL_LEVEL(01, tl_dispatch_00)
TL_LEVEL(02, tl_dispatch_01)
TL_LEVEL(03, tl_dispatch_02)
TL_LEVEL(04, tl_dispatch_03)
TL_LEVEL(05, tl_dispatch_04)
TL_LEVEL(06, tl_dispatch_05)
TL_LEVEL(07, tl_dispatch_06)
TL_LEVEL(08, tl_dispatch_07)
TL_LEVEL(09, tl_dispatch_08)
TL_LEVEL(10, tl_dispatch_09)
TL_LEVEL(11, tl_dispatch_10)
TL_LEVEL(12, tl_dispatch_11)
TL_LEVEL(13, tl_dispatch_12)
TL_LEVEL(14, tl_dispatch_13)
TL_LEVEL(15, tl_dispatch_14)
TL_LEVEL(16, tl_dispatch_15)
TL_LEVEL(17, tl_dispatch_16)

TL_LEVEL(op_linear, tl_dispatch_17)
TL_LEVEL(op_relu, tl_dispatch_17)
TL_LEVEL(op_layer_norm, tl_dispatch_17)
TL_LEVEL(op_add, tl_dispatch_17)

/* One launch of kernel (a cudaKernel_t or host stub) through operator op (0-3) and
 * twenty frames below it. Returns the cudaError_t. */
TL_FRAME int torchlike_launch(int op, const void *kernel)
{
	static void *args[2];
	struct tl_call c = {.kernel = kernel, .args = args};
	int r;

	switch (op & 3) {
	case 0:
		r = tl_dispatch_op_linear(&c);
		break;
	case 1:
		r = tl_dispatch_op_relu(&c);
		break;
	case 2:
		r = tl_dispatch_op_layer_norm(&c);
		break;
	default:
		r = tl_dispatch_op_add(&c);
		break;
	}
	return r + (int)(c.depth & 0);
}
