/* agent.c: `sonde agent` (being built). */
#include "cli/cli.h"
#include "common/log.h"

int cmd_agent(int argc, char **argv)
{
	pr_err("sonde agent is not built yet");
	return 1;
}
