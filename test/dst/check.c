/*
 * The invariants, read from the API server model (the truth): the pods
 * bound there, their allocation annotations, and the nodes' ledger Leases.
 */
#include "dst.h"
#include "api.h"
#include "ledger.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEV 64

/* "node:0,1" -> ids; false when it does not parse. */
static bool parse_allocated(const char *s, const char *node, int *ids, int *n)
{
	size_t nl = strlen(node);
	*n = 0;
	if (strncmp(s, node, nl) || s[nl] != ':')
		return false;
	for (const char *p = s + nl + 1; *p && *n < MAX_DEV;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < 0 || v >= MAX_DEV)
			return false;
		ids[(*n)++] = (int)v;
		p = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return false;
	}
	return true;
}

static int node_index(const char *node)
{
	return node[0] == 'n' && node[1] >= '0' && node[1] < '0' + DST_NODES && !node[2] ? node[1] - '0' : -1;
}

/* The ledger of node as the API server has it; false when there is none. */
static bool ledger_now(struct world *w, const char *node, struct ledger *l)
{
	const cJSON *lease = apis_ledger(w->api, node);
	char err[256];
	if (!lease || ledger_decode(lease, l, err, sizeof(err)))
		return false;
	return true;
}

static int fail(struct world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct world *w, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->failure, sizeof(w->failure), fmt, ap);
	va_end(ap);
	return -1;
}

static bool lost(struct world *w, const char *uid)
{
	for (int i = 0; i < w->nlost; i++)
		if (!strcmp(w->lost[i], uid))
			return true;
	return false;
}

/* A lost entry that is back: no longer exempt. */
static void found_again(struct world *w, const char *uid)
{
	for (int i = 0; i < w->nlost; i++)
		if (!strcmp(w->lost[i], uid)) {
			memmove(w->lost[i], w->lost[w->nlost - 1], sizeof(w->lost[i]));
			w->nlost--;
			return;
		}
}

static bool taken(struct world *w, const struct apis_pod *p);

/* A gang's places in the ledgers now, and its members bound and live; whether one was touched or ended. */
static void gang_count(struct world *w, const char *gang, const struct apis_pod *pods, int n, int *places, int *bound,
		       bool *touched)
{
	*places = *bound = 0;
	*touched = false;
	for (int k = 0; k < DST_NODES; k++) {
		char node[8];
		struct ledger l;
		snprintf(node, sizeof(node), "n%d", k);
		if (!ledger_now(w, node, &l))
			continue;
		for (int e = 0; e < l.n; e++)
			*places += ledger_entry_is_place(&l.e[e]) && !strcmp(l.e[e].gang, gang) && !strcmp(l.e[e].ns, "ml");
		ledger_release(&l);
	}
	for (int i = 0; i < w->npods; i++) {
		const struct spod *sp = &w->pods[i];
		if (strcmp(sp->gang, gang))
			continue;
		*touched = *touched || sp->touched;
		for (int j = 0; j < n; j++) {
			if (strcmp(pods[j].uid, sp->uid))
				continue;
			*touched = *touched || pods[j].finished;   /* (kubelet failed it at admission: it drops out) */
			*bound += pods[j].node[0] && !pods[j].finished;
		}
	}
}

/* Places and bound members of a gang never exceed its size; at quiescence all or none (gangs no member of which was touched or ended). */
static int check_gangs(struct world *w, bool quiescent)
{
	static struct apis_pod pods[DST_MAX_PODS];
	int n = apis_pods(w->api, pods, DST_MAX_PODS);
	for (int g = 0; g < w->ngangs; g++) {
		char gang[16];
		int size = 0;
		snprintf(gang, sizeof(gang), "g%d", g);
		for (int i = 0; i < w->npods && !size; i++)
			if (!strcmp(w->pods[i].gang, gang))
				size = w->pods[i].gang_size;
		if (!size)
			continue;
		int places, bound;
		bool touched;
		gang_count(w, gang, pods, n, &places, &bound, &touched);
		if (places + bound > size)
			return fail(w, "gang %s of %d: %d places and %d members bound", gang, size, places, bound);
		if (!quiescent)
			continue;
		if (places)
			return fail(w, "leaked: gang %s still has %d places after quiescence (%d of %d members bound)", gang,
				    places, bound, size);
		if (touched)
			continue;
		if (bound && bound < size)
			return fail(w, "gang %s half placed: %d of %d members bound after quiescence", gang, bound, size);
		bound ? w->gangs_complete++ : w->gangs_none++;
	}
	return 0;
}

/*
 * Live bound pods: no device twice; annotation on the pod's node; an entry
 * in its ledger. (A pod whose entry lose-entry took is exempt until it is
 * back, and so are the devices another pod took meanwhile: that is what
 * losing an entry does, not the protocol.)
 */
int check_step(struct world *w)
{
	static struct apis_pod pods[DST_MAX_PODS];
	int n = apis_pods(w->api, pods, DST_MAX_PODS);
	const char *holder[DST_NODES][MAX_DEV] = { { 0 } }, *holder_uid[DST_NODES][MAX_DEV] = { { 0 } };
	struct ledger l[DST_NODES];
	bool have[DST_NODES];
	for (int k = 0; k < DST_NODES; k++) {
		char node[8];
		snprintf(node, sizeof(node), "n%d", k);
		have[k] = ledger_now(w, node, &l[k]);
	}
	int rc = 0;
	for (int i = 0; i < n && !rc; i++) {
		const struct apis_pod *p = &pods[i];
		if (!p->node[0] || p->finished || !p->allocated)
			continue;
		int k = node_index(p->node), ids[MAX_DEV], nid;
		if (k < 0 || !parse_allocated(p->allocated, p->node, ids, &nid)) {
			rc = fail(w, "pod %s bound to %s has allocation annotation '%s' of another node", p->name, p->node,
				  p->allocated);
			break;
		}
		bool exempt = lost(w, p->uid);
		for (int d = 0; d < nid && !rc; d++) {
			if (holder[k][ids[d]] && !exempt && !lost(w, holder_uid[k][ids[d]]))
				rc = fail(w, "GPU %s held by two live pods: %s and %s", p->allocated, holder[k][ids[d]], p->name);
			holder[k][ids[d]] = p->name;
			holder_uid[k][ids[d]] = p->uid;
		}
		bool held = have[k] && ledger_find(&l[k], p->uid) >= 0;
		/* (back on other devices, its own taken meanwhile: both stay held, still exempt) */
		if (held && exempt && !taken(w, p))
			found_again(w, p->uid);
		else if (!rc && !held && !exempt)
			rc = fail(w, "live pod %s bound with %s has no entry in the ledger of %s", p->name, p->allocated, p->node);
	}
	for (int k = 0; k < DST_NODES; k++)
		if (have[k])
			ledger_release(&l[k]);
	if (!rc)
		rc = node_check(w, w->failure, sizeof(w->failure), lost);
	if (!rc)
		rc = check_gangs(w, false);
	return rc;
}

/* Whether another pod's ledger entry holds a device of p's (taken before the entry could be put back). */
static bool taken(struct world *w, const struct apis_pod *p)
{
	int ids[MAX_DEV], n;
	struct ledger l;
	if (!p->allocated || !parse_allocated(p->allocated, p->node, ids, &n) || !ledger_now(w, p->node, &l))
		return false;
	bool clash = false;
	for (int e = 0; e < l.n && !clash; e++)
		for (int k = 0; k < l.e[e].a.ndev && !clash; k++)
			for (int d = 0; d < n && !clash; d++)
				clash = alloc_id(&l.e[e].a, k) == ids[d] && strcmp(l.e[e].a.uid, p->uid);
	ledger_release(&l);
	return clash;
}

/* After quiescence also: lost entries are back, and every ledger entry is a live bound pod's, on its node, with its devices. */
int check_quiescent(struct world *w)
{
	if (check_step(w) || node_check_quiescent(w, w->failure, sizeof(w->failure), lost) || check_gangs(w, true))
		return -1;
	if (w->nlost) {
		static struct apis_pod all[DST_MAX_PODS];
		int m = apis_pods(w->api, all, DST_MAX_PODS);
		for (int i = 0; i < m; i++)
			if (lost(w, all[i].uid) && all[i].node[0] && !all[i].finished && !taken(w, &all[i]))
				return fail(w, "the ledger entry of live pod %s (%s, %s) was lost and never put back", all[i].name,
					    all[i].allocated ? all[i].allocated : "-", all[i].managed ? "watched" : "not watched");
	}
	static struct apis_pod pods[DST_MAX_PODS];
	int n = apis_pods(w->api, pods, DST_MAX_PODS);
	int rc = 0;
	for (int k = 0; k < DST_NODES && !rc; k++) {
		char node[8];
		snprintf(node, sizeof(node), "n%d", k);
		struct ledger l;
		if (!ledger_now(w, node, &l))
			continue;
		for (int e = 0; e < l.n && !rc; e++) {
			const struct alloc *a = &l.e[e].a;
			const struct apis_pod *p = NULL;
			for (int i = 0; i < n && !p; i++)
				if (!strcmp(pods[i].uid, a->uid))
					p = &pods[i];
			char ids[256];
			alloc_ids(a, ids, sizeof(ids));
			if (!p)
				rc = fail(w, "leaked: ledger of %s holds %s of %s, a pod that is gone", node, ids, l.e[e].name);
			else if (p->finished)
				rc = fail(w, "leaked: ledger of %s holds %s of finished pod %s", node, ids, p->name);
			else if (strcmp(p->node, node))
				rc = fail(w, "leaked: ledger of %s holds %s of pod %s, not bound there", node, ids, p->name);
			else {
				char want[300];
				snprintf(want, sizeof(want), "%s:%s", node, ids);
				if ((!p->allocated || strcmp(p->allocated, want)) && !(lost(w, p->uid) && taken(w, p)))
					rc = fail(w, "ledger of %s holds %s of pod %s, not the devices it was bound with", node, want,
						  p->name);
			}
		}
		ledger_release(&l);
	}
	return rc;
}

int check_refused_bind(struct world *w, const struct task *t)
{
	const struct spod *sp = &w->pods[t->pod];
	if (sp->faulted)
		return 0;
	for (const struct task *o = w->tasks; o; o = o->next)
		if (o->pod == t->pod)
			return 0;          /* another try is in flight: it may need the entry */
	static struct apis_pod pods[DST_MAX_PODS];
	int n = apis_pods(w->api, pods, DST_MAX_PODS);
	const struct apis_pod *p = NULL;
	for (int i = 0; i < n && !p; i++)
		if (!strcmp(pods[i].uid, sp->uid))
			p = &pods[i];
	if (!p || p->node[0])
		return 0;
	const char *at = strstr(t->body, "\"Node\":\"");
	char node[16] = "";
	if (at)
		sscanf(at + 8, "%15[^\"]", node);
	struct ledger l;
	if (!node[0] || !ledger_now(w, node, &l))
		return 0;
	int i = ledger_find(&l, sp->uid);
	ledger_release(&l);
	if (i < 0)
		return 0;
	return fail(w, "%s was refused (\"%s\") with no fault met by any try of %s and none in flight, "
		    "but left its reservation in the ledger of %s", t->what, t->error, sp->name, node);
}
