/* server.c: `sonde server` (being built). */
#include "cli/cli.h"
#include "common/log.h"

int cmd_server(int argc, char **argv)
{
	pr_err("sonde server is not built yet");
	return 1;
}
