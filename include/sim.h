/*
 * sim: offline trace replay through the scoring core
 * (`gpu-extender simulate ...`). See docs/simulation.md.
 */
#ifndef GPU_SIM_H
#define GPU_SIM_H

/* Entry point of the `simulate` subcommand; argv[0] is "simulate". Exit status. */
int sim_main(int argc, char **argv);

#endif
