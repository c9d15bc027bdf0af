/* serve: the `gpu-extender serve` command: config, cache, HTTP, signals. */
#ifndef GPU_SERVE_H
#define GPU_SERVE_H

/* The product's version (the VERSION file) and the commit it was built from (the Makefile). */
#ifndef GPU_VERSION
#define GPU_VERSION "dev"
#endif
#ifndef GPU_COMMIT
#define GPU_COMMIT "unknown"
#endif

/* argv[0] is "serve". Returns the process exit status. */
int serve_main(int argc, char **argv);

/* argv[0] is "metrics": prints the reference of the extender's /metrics (docs/metrics.md). */
int serve_metrics_main(int argc, char **argv);

#endif
