/* serve: the `gpu-extender serve` command: config, cache, HTTP, signals. */
#ifndef GPU_SERVE_H
#define GPU_SERVE_H

#ifndef GPU_VERSION
#define GPU_VERSION "dev"
#endif

/* argv[0] is "serve". Returns the process exit status. */
int serve_main(int argc, char **argv);

#endif
