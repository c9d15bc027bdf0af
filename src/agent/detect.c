/*
 * Detection: the skeleton every vendor's detector runs (detect_run), and
 * one round over all vendors, keeping each vendor's last good result when
 * its tools break, so GPUs do not vanish from the published status because
 * a tool hung once.
 */
#include "agent.h"
#include "detect.h"
#include "text.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The detectors, by vendor (slot = vendor - 1): a new vendor's detector is listed here. */
static const struct detect_vendor *const detectors[AGENT_NVENDOR] = {
	&detect_nvidia,
	&detect_amd,
	&detect_intel,
};

const struct detect_vendor *detect_vendor_of(enum gpu_vendor v)
{
	return (unsigned)v >= 1 && (unsigned)v <= AGENT_NVENDOR ? detectors[v - 1] : NULL;
}

#define TOOL_ERR_MAX 300

/* Runs tool t: 1 parsed, 0 not installed, -1 failed (why in err); seen says how far it got. */
static int run_tool(const struct detect_tool *t, const struct toolrun_opts *opts, struct agent_vendor_result *vr,
		    void *work, bool *ran, char *err, size_t errlen)
{
	if (t->run) {
		int rc = t->run(opts, vr, work, err, errlen);
		*ran = rc > 0;
		return rc;
	}
	char *out;
	int rc = toolrun_capture(opts, t->argv, &out, err, errlen);
	*ran = rc > 0;
	if (rc > 0) {
		char perr[256];
		if (t->parse(out, work, perr, sizeof(perr))) {
			if (t->what)
				snprintf(err, errlen, "%s: %s", t->what, perr);
			else
				snprintf(err, errlen, "%s printed output the agent cannot use: %s", t->argv[0], perr);
			rc = -1;
		}
	} else if (rc < 0 && t->what) {
		char why[TOOL_ERR_MAX];
		snprintf(why, sizeof(why), "%s", err);
		snprintf(err, errlen, "%s: %s", t->what, why);
	}
	free(out);
	return rc;
}

int detect_run(const struct detect_vendor *d, const struct toolrun_opts *opts, struct agent_vendor_result *vr,
	       char *err, size_t errlen)
{
	agent_vendor_result_init(vr, d->vendor);
	void *work = calloc(1, d->work_size);
	if (!work) {
		snprintf(err, errlen, "out of memory");
		return AGENT_DETECT_FAILED;
	}
	struct detect_seen seen;
	memset(&seen, 0, sizeof(seen));
	char terr[DETECT_MAX_TOOLS][TOOL_ERR_MAX];
	int rc = AGENT_DETECT_FAILED, installed = 0, parsed = 0;
	for (int k = 0; k < d->ntools; k++) {
		const struct detect_tool *t = &d->tool[k];
		terr[k][0] = '\0';
		int trc = run_tool(t, opts, vr, work, &seen.ran[k], terr[k], sizeof(terr[k]));
		seen.parsed[k] = trc > 0;
		installed += trc != 0;
		parsed += trc > 0;
		if (t->required && trc <= 0) {
			/* without it nothing else can be used */
			if (trc < 0)
				snprintf(err, errlen, "%s", terr[k]);
			rc = trc < 0 ? AGENT_DETECT_FAILED : AGENT_DETECT_ABSENT;
			goto done;
		}
	}
	if (!installed) {
		rc = AGENT_DETECT_ABSENT;
		goto done;
	}
	if (!parsed) {
		size_t n = 0;
		err[0] = '\0';
		for (int k = 0; k < d->ntools && n < errlen; k++)
			if (terr[k][0])
				n += (size_t)snprintf(err + n, errlen - n, "%s%s", n ? "; " : "", terr[k]);
		goto done;
	}
	for (int k = 0; k < d->ntools; k++)
		if (terr[k][0])
			agent_note(vr, "%s", terr[k]);
	rc = d->merge(opts, work, &seen, vr, err, errlen);
	if (rc == AGENT_DETECT_OK)
		agent_compute_islands(vr);
done:
	free(work);
	return rc;
}

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
		int rc = detect_run(detectors[v], opts, vr, err, sizeof(err));
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
