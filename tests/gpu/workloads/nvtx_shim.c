/*
 * nvtx_shim.c: NVTX's C API (the toolkit's header-only nvtx3) behind three plain functions
 * for a Python job to call through ctypes, as torch.cuda.nvtx.range_push/range_pop call the
 * NVTX compiled into PyTorch: the real NVTX, which loads NVTX_INJECTION64_PATH at its
 * first call and hands its ranges to the injection library.
 */
#include <nvtx3/nvToolsExt.h>

__attribute__((visibility("default"))) int shim_push(const char *message)
{
	return nvtxRangePushA(message);
}

/* The same through nvtxRangePushEx with an ASCII message. */
__attribute__((visibility("default"))) int shim_push_ex(const char *message)
{
	nvtxEventAttributes_t a = {0};

	a.version = NVTX_VERSION;
	a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
	a.messageType = NVTX_MESSAGE_TYPE_ASCII;
	a.message.ascii = message;
	return nvtxRangePushEx(&a);
}

__attribute__((visibility("default"))) int shim_pop(void)
{
	return nvtxRangePop();
}
