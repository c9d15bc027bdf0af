/*
 * libFuzzer target: a kubeconfig file (YAML or JSON) through
 * kube_config_load, from the file on disk as the extender and the agent
 * read it: the YAML->JSON step, then contexts, clusters, users, base64
 * data and relative paths. Loaded twice: by current-context and by the
 * context named "fuzz".
 */
#include "fuzz.h"

#include "kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int quiet;
	if (!quiet++)
		fuzz_quiet();
	const char *path = fuzz_file(data, size);
	static const char *const contexts[] = { NULL, "fuzz" };
	for (size_t i = 0; i < 2; i++) {
		struct kube_config cfg;
		char err[512];
		kube_config_init(&cfg);
		kube_config_load(&cfg, path, contexts[i], err, sizeof(err));
		kube_config_release(&cfg);
	}
	return 0;
}
