/* labelproc.c: a process named labelproc whose CPU time is burnt by two
 * threads it names worker-a and worker-b (prctl(PR_SET_NAME), as
 * pthread_setname_np does), SECONDS of CPU each (default 3), while its main
 * thread waits for them. The ground truth of the naming tests: the process
 * is the service and the comm, each thread a thread label
 * (tests/integration/test_agent_labels.py). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>

#include "burn.h"

static double seconds = 3.0;

__attribute__((noinline)) static void spin(void)
{
	BURN_CPU((uint64_t)(seconds * 1e9));
	__asm__ volatile("" ::: "memory");
}

static void *worker(void *name)
{
	if (prctl(PR_SET_NAME, name, 0, 0, 0)) {
		perror("labelproc: prctl(PR_SET_NAME)");
		exit(1);
	}
	spin();
	return NULL;
}

int main(int argc, char **argv)
{
	static char a[] = "worker-a", b[] = "worker-b";
	pthread_t ta, tb;

	if (argc > 1)
		seconds = atof(argv[1]);
	if (pthread_create(&ta, NULL, worker, a) || pthread_create(&tb, NULL, worker, b)) {
		fprintf(stderr, "labelproc: can't start its threads\n");
		return 1;
	}
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	return 0;
}
