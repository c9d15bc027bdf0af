/*
 * Devices counted in the cache ahead of the ledger (cluster mode): a bind's
 * from its arrival until it is answered, and the node a filter chose alone
 * (filterKeepsBest 1) until the pod's bind arrives. kube-scheduler places
 * the next pods meanwhile; they must see these devices taken.
 */
#include "extender_impl.h"
#include "clock.h"
#include "metrics.h"

bool extender_assume_devices(struct extender *x, const struct api_pod_ref *pod, const char *node,
			     const struct claim *c)
{
	struct bind_request br = {
		.ns = pod->ns, .name = pod->name, .uid = pod->uid, .node = node, .claim = c,
		.policy = { .id = extender_policy(x, c), .seed = policy_hash(pod->uid) },
	};
	bool ok = false;
	cache_lock(x->o.cache);
	const struct gpu_node *view = cache_peek(x->o.cache, node);
	struct fit f;
	double score;
	if (view && policy_place(&br.policy, view, c, &f, &score)) {
		struct alloc al;
		ok = !bind_alloc(&al, &br, view, &f, NULL, 0) && !cache_assume(x->o.cache, node, &al);
	}
	cache_unlock(x->o.cache);
	return ok;
}

void extender_forget_assumed(struct extender *x, const char *uid, const char *node)
{
	cache_lock(x->o.cache);
	cache_forget(x->o.cache, uid, node);
	cache_unlock(x->o.cache);
}

static void forget_expired_choices(struct extender *x)
{
	struct choice old[16];
	int n;
	while ((n = choices_take_expired(&x->choices, clock_mono_ms(), old, 16)) > 0) {
		metrics_add(M_FILTER_CHOICES, CHOICE_EXPIRED, (uint64_t)n);
		for (int i = 0; i < n; i++)
			extender_forget_assumed(x, old[i].uid, old[i].node);
	}
}

void extender_forget_choices(struct extender *x, const char *uid)
{
	struct choice old;
	if (uid && choices_take(&x->choices, uid, &old)) {
		metrics_inc(M_FILTER_CHOICES, CHOICE_ELSEWHERE);
		extender_forget_assumed(x, old.uid, old.node);
	}
	forget_expired_choices(x);
}

/*
 * The filter's devices stay counted, now as the bind's: were they forgotten
 * and the bind's counted after, a filter running between the two would see
 * the node one pod emptier and send a pod there that its bind refuses.
 */
bool extender_choice_to_bind(struct extender *x, const char *uid, const char *node)
{
	struct choice old;
	bool kept = false;
	if (choices_take(&x->choices, uid, &old)) {
		kept = !strcmp(old.node, node);
		metrics_inc(M_FILTER_CHOICES, kept ? CHOICE_BOUND : CHOICE_ELSEWHERE);
		if (!kept)
			extender_forget_assumed(x, old.uid, old.node);
	}
	forget_expired_choices(x);
	return kept;
}

void extender_assume_choice(struct extender *x, const struct api_pod_ref *pod, const char *node,
			    const struct claim *c)
{
	if (!extender_assume_devices(x, pod, node, c)) {
		metrics_inc(M_FILTER_CHOICES, CHOICE_UNCOUNTED);
	} else if (!choices_put(&x->choices, pod->uid, node, clock_mono_ms() + CHOICE_TTL_MS)) {
		metrics_inc(M_FILTER_CHOICES, CHOICE_UNCOUNTED);
		extender_forget_assumed(x, pod->uid, node);   /* full: not counted rather than never forgotten */
	}
}
