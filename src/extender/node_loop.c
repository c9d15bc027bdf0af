/*
 * The loop filter and prioritize run over a request's nodes: one result per
 * node state where the claim allows (class_memo.h), and a node looked at
 * without the pod's own reservation where it holds one. The per-node steps
 * are inline in extender_impl.h.
 */
#include "extender_impl.h"

#include <stdlib.h>
#include <string.h>

bool extender_fit_by_state(const struct verb_args *a)
{
	return a->claim_ok && claim_wants_gpu(&a->claim) && !claim_reads_node_strings(&a->claim);
}

struct class_memo *extender_memo_new(bool by_state)
{
	struct class_memo *m = by_state ? malloc(sizeof(*m)) : NULL;
	if (m)
		class_memo_init(m);
	return m;
}

int extender_loop_init(struct node_loop *l, const struct verb_args *a, bool by_state)
{
	l->a = a;
	l->node = malloc(((size_t)a->n + 1) * sizeof(*l->node));
	l->memo = extender_memo_new(by_state);
	return l->node ? 0 : -1;
}

void extender_loop_release(struct node_loop *l)
{
	free(l->node);
	free(l->memo);
}

void extender_unapply_pods(struct gpu_node *n, const struct cache_node *cn, const char *const *uids, int nuid)
{
	const struct alloc_rec *r = cn->allocs;
	for (int i = 0; i < cn->nallocs; i++, r = alloc_rec_next(r))
		for (int k = 0; k < nuid; k++)
			if (!strcmp(alloc_rec_uid(r), uids[k])) {
				struct alloc a;
				alloc_rec_unpack(r, &a);
				alloc_unapply(n, &a);
			}
}

struct gpu_node *extender_without_own(const struct cache_node *cn, const struct verb_args *a)
{
	struct gpu_node *n = loop_own_alloc(cn, a) ? gpu_node_clone(cn->node) : NULL;
	const char *uid = a->ref.uid;
	if (n)
		extender_unapply_pods(n, cn, &uid, 1);
	return n;
}
