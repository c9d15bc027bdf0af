/*
 * libFuzzer target: the simulator's readers, `simulate --nodes` and
 * `--pods`: the openb node list CSV (sn,cpu_milli,memory_mib,gpu,model)
 * and pod list CSV (name,cpu_milli,...,gpu_milli[,gpu_spec]), each
 * through its parser on the same text. A pod list that parses also gets
 * its workload mix computed (every distinct claim is used there).
 */
#include "fuzz.h"

#include "sim_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int quiet;
	if (!quiet++)
		fuzz_quiet();
	char *text = fuzz_cstr(data, size);
	char err[512];
	struct sim_cluster cl;
	if (!sim_parse_nodes(text, &cl, err, sizeof(err)))
		sim_cluster_release(&cl);
	struct sim_trace tr;
	if (!sim_parse_pods(text, &tr, err, sizeof(err))) {
		struct workload *wl = malloc(sizeof(*wl));
		if (!wl)
			abort();
		sim_trace_workload(&tr, wl);
		free(wl);
		sim_trace_release(&tr);
	}
	free(text);
	return 0;
}
