/* run.c: `sonde run` (being built). */
#include "cli/cli.h"
#include "common/log.h"

int cmd_run(int argc, char **argv)
{
	pr_err("sonde run is not built yet");
	return 1;
}
