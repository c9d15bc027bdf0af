/* kubectl gpu: what its files share (not part of the module's interface). */
#ifndef GPU_KGPU_IMPL_H
#define GPU_KGPU_IMPL_H

#include "kgpu.h"

/* The GpuClaim ns/name among those read (api_claim_lookup; ctx is the cluster). */
const cJSON *kg_claim_lookup(void *ctx, const char *ns, const char *name);
/* The pod's claim, as the extender decodes it (default resource names). 0, or -1 with err. */
int kg_pod_claim(const struct kg_cluster *c, const cJSON *pod, struct claim *out, char *err, size_t errlen);
/* "2 whole", "1 shared (8192 MiB, 30%)", "1 MIG", with the model asked for. */
void kg_claim_text(const struct claim *c, char *out, size_t size);

#endif
