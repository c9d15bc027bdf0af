/* gpu-extender: entry point; dispatches to the subcommands. */
#include "certs.h"
#include "serve.h"
#include "sim.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
	fprintf(out,
		"usage: gpu-extender <command> [options]\n"
		"\n"
		"commands:\n"
		"  serve      run the scheduler extender (see gpu-extender serve --help)\n"
		"  simulate   replay a cluster trace through the scoring core\n"
		"  certs      make or renew the install's certificates as Secrets (see --help)\n"
		"  metrics    print the reference of /metrics (a Markdown table, docs/metrics.md)\n"
		"  version    print the version\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "serve"))
		return serve_main(argc - 1, argv + 1);
	if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
		printf("gpu-extender %s (commit %s)\n", GPU_VERSION, GPU_COMMIT);
		return 0;
	}
	if (!strcmp(argv[1], "metrics"))
		return serve_metrics_main(argc - 1, argv + 1);
	if (!strcmp(argv[1], "certs"))
		return certs_main(argc - 1, argv + 1);
	if (!strcmp(argv[1], "simulate"))
		return sim_main(argc - 1, argv + 1);
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "gpu-extender: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
