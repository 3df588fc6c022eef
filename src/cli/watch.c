/* watch.c: `sonde watch` (being built). */
#include "cli/cli.h"
#include "common/log.h"

int cmd_watch(int argc, char **argv)
{
	pr_err("sonde watch is not built yet");
	return 1;
}
