/*
 * One detection round over all vendors, keeping each vendor's last good
 * result when its tools break, so GPUs do not vanish from the published
 * status because nvidia-smi hung once.
 */
#include "agent.h"
#include "text.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*detect_fn)(const struct toolrun_opts *, struct agent_vendor_result *, char *, size_t);

static const detect_fn detectors[AGENT_NVENDOR] = {
	agent_detect_nvidia,
	agent_detect_amd,
	agent_detect_intel,
};

void agent_state_init(struct agent_state *st)
{
	memset(st, 0, sizeof(*st));
}

void agent_state_release(struct agent_state *st)
{
	for (int v = 0; v < AGENT_NVENDOR; v++)
		free(st->last[v]);
	memset(st, 0, sizeof(*st));
}

int agent_detect_round(const struct toolrun_opts *opts, struct agent_state *st,
		       const char *node_name, struct agent_node *node)
{
	int failed = 0;
	for (int v = 0; v < AGENT_NVENDOR; v++) {
		const char *vname = gpu_vendor_name((enum gpu_vendor)(v + 1));
		struct agent_vendor_result *vr = malloc(sizeof(*vr));
		if (!vr)
			return -1;
		char err[AGENT_ERR_MAX] = "";
		int rc = detectors[v](opts, vr, err, sizeof(err));
		agent_text_clean(err);   /* log lines carry tool text */
		enum agent_vstate before = st->vstate[v];
		if (rc == AGENT_DETECT_OK) {
			char note[AGENT_ERR_MAX];
			snprintf(note, sizeof(note), "%s", vr->note);
			agent_text_clean(note);
			/* remarks are logged when they change, not every round */
			if (note[0] && (before != AGENT_V_OK || strcmp(note, st->vmsg[v])))
				log_warn("gpu detection remark", "vendor=%s note=\"%s\"", vname, note);
			if (before == AGENT_V_FAILED || before == AGENT_V_STALE)
				log_info("gpu detection recovered", "vendor=%s devices=%d", vname, vr->ngpu);
			free(st->last[v]);
			st->last[v] = vr;
			st->vstate[v] = AGENT_V_OK;
			snprintf(st->vmsg[v], sizeof(st->vmsg[v]), "%s", note);
			continue;
		}
		free(vr);
		if (rc == AGENT_DETECT_ABSENT) {
			/* tools gone: no GPUs of this vendor any more */
			free(st->last[v]);
			st->last[v] = NULL;
			st->vstate[v] = AGENT_V_ABSENT;
			st->vmsg[v][0] = '\0';
			continue;
		}
		failed = 1;
		/* one line per failure streak (and when the reason changes), not one per round */
		bool same = (before == AGENT_V_STALE || before == AGENT_V_FAILED) && !strcmp(st->vmsg[v], err);
		st->vstate[v] = st->last[v] ? AGENT_V_STALE : AGENT_V_FAILED;
		snprintf(st->vmsg[v], sizeof(st->vmsg[v]), "%s", err);
		if (same)
			log_debug("gpu detection still failing", "vendor=%s error=\"%s\"", vname, err);
		else if (st->last[v])
			log_error("gpu detection failed, keeping the last good status",
				  "vendor=%s devices=%d error=\"%s\"", vname, st->last[v]->ngpu, err);
		else
			log_error("gpu detection failed, no earlier status to keep",
				  "vendor=%s error=\"%s\"", vname, err);
	}
	st->rounds++;
	const struct agent_vendor_result *vr[AGENT_NVENDOR];
	const char *msg[AGENT_NVENDOR];
	for (int v = 0; v < AGENT_NVENDOR; v++) {
		vr[v] = st->last[v];
		msg[v] = st->vmsg[v];
	}
	agent_node_build(node, node_name, vr, st->vstate, msg);
	return failed;
}
