/* spawner.c: starts N short-lived children (default 3) one after another,
 * each an exec of this program that burns 200 ms of CPU in child_burn and
 * exits, while the parent burns in parent_burn between them. The tests check
 * that the children, gone long before the profile is written, are named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "burn.h"

__attribute__((noinline)) void child_burn(void)
{
	BURN_CPU(200000000);
}

__attribute__((noinline)) void parent_burn(void)
{
	BURN_CPU(100000000);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;

	if (argc > 1 && !strcmp(argv[1], "child")) {
		child_burn();
		return 0;
	}
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			/* Exec the file itself, not /proc/self/exe: the
			 * child's comm must stay "spawner". */
			char self[4096];
			ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);

			if (len > 0) {
				self[len] = 0;
				execl(self, argv[0], "child", (char *)NULL);
			}
			_exit(127);
		}
		parent_burn();
		waitpid(pid, NULL, 0);
	}
	return 0;
}
