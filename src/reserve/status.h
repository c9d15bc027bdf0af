/* Internal to src/reserve: where kubectl shows a claim's or a gang's state (status subresources). */
#ifndef GPU_RESERVE_STATUS_H
#define GPU_RESERVE_STATUS_H

#include "reserve_impl.h"

/* The GpuClaim's status (claim "" or NULL: none, nothing written). */
void reserve_claim_status(struct reserve *r, const char *ns, const char *claim, const char *phase,
			  const char *node, const char *ids, const char *pod, const char *message);
/* A merge patch of a status subresource; a refusal is logged (what names the object), not returned. */
void reserve_patch_status(struct reserve *r, const char *path, const char *body, const char *what);
/* Now as a status date-time (whole seconds). */
void reserve_status_time(char *out, size_t size);

#endif
