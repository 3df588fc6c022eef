/*
 * cupti_holder.c: preloaded (LD_PRELOAD) into a CUDA job, it takes CUPTI's one subscription
 * as the library loads, as another profiler that got there first does (PyTorch's profiler,
 * Nsight): the tests' way to see Sonde's CUPTI library find CUPTI taken, report it, and leave
 * the job as it was.
 */
#include <stdio.h>

#include <cupti.h>

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
				 const void *data)
{
}

__attribute__((constructor)) static void hold(void)
{
	CUpti_SubscriberHandle sub;
	CUptiResult r = cuptiSubscribe(&sub, on_callback, NULL);

	if (r)
		fprintf(stderr, "cupti_holder: cuptiSubscribe failed: %d\n", (int)r);
}
