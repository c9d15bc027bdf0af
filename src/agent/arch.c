/*
 * Normalisation tables: architecture names per vendor and interconnect
 * speeds per generation. docs/agent.md has the same tables in prose; keep
 * both in step.
 */
#include "agent.h"

#include "strnum.h"
#include "text.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- name tokens ---- */

#define MAX_TOK 16

struct toks {
	int n;
	char t[MAX_TOK][32];
};

/* Splits a product name at blanks, '-', '/', '(' and ')': "NVIDIA A100-SXM4-80GB". */
static void split_name(const char *name, struct toks *tk)
{
	tk->n = 0;
	const char *s = name ? name : "";
	while (*s && tk->n < MAX_TOK) {
		while (*s && strchr(" -/()\t", *s))
			s++;
		size_t n = strcspn(s, " -/()\t");
		if (!n)
			break;
		agent_text_copy(tk->t[tk->n], sizeof(tk->t[0]), s, n);
		tk->n++;
		s += n;
	}
}

static bool has_tok(const struct toks *tk, const char *w)
{
	for (int i = 0; i < tk->n; i++) {
		if (agent_text_ieq(tk->t[i], w))
			return true;
	}
	return false;
}

/* A token that is w followed only by letters ("H100L", "A10G", "L40S"). */
static bool has_model(const struct toks *tk, const char *w)
{
	size_t n = strlen(w);
	for (int i = 0; i < tk->n; i++) {
		const char *t = tk->t[i];
		if (strncasecmp(t, w, n))
			continue;
		const char *rest = t + n;
		while (*rest && isalpha((unsigned char)*rest))
			rest++;
		if (!*rest)
			return true;
	}
	return false;
}

/* The 4-digit GeForce/RTX number after "RTX"/"GTX" ("RTX 4090" -> 40). */
static int series_after(const struct toks *tk, const char *brand)
{
	for (int i = 0; i + 1 < tk->n; i++) {
		if (!agent_text_ieq(tk->t[i], brand))
			continue;
		const char *num = tk->t[i + 1];
		if (strlen(num) == 4 && isdigit((unsigned char)num[0]) && isdigit((unsigned char)num[1]) &&
		    isdigit((unsigned char)num[2]) && isdigit((unsigned char)num[3]))
			return (num[0] - '0') * 10 + (num[1] - '0');
	}
	return -1;
}

/* ---- NVIDIA ---- */

static const char *nvidia_arch_from_cc(const char *cc)
{
	if (!cc || !*cc)
		return "";
	char buf[8];
	snprintf(buf, sizeof(buf), "%s", cc);
	char *dot = strchr(buf, '.');
	if (!dot)
		return "";
	*dot = '\0';
	int major, minor;
	if (!strnum_int(buf, 1, 99, &major) || !strnum_int(dot + 1, 0, 9, &minor))
		return "";
	switch (major) {
	case 3:
		return "kepler";
	case 5:
		return "maxwell";
	case 6:
		return "pascal";
	case 7:
		return minor >= 5 ? "turing" : "volta";
	case 8:
		return minor == 9 ? "ada" : "ampere";
	case 9:
		return "hopper";
	case 10:
	case 11:
	case 12:
		return "blackwell";
	default:
		return "";
	}
}

static const struct {
	const char *model;
	const char *arch;
} nvidia_models[] = {
	{ "GB300", "blackwell" }, { "GB200", "blackwell" }, { "B300", "blackwell" },
	{ "B200", "blackwell" }, { "B100", "blackwell" },
	{ "GH200", "hopper" }, { "H200", "hopper" }, { "H100", "hopper" }, { "H800", "hopper" },
	{ "H20", "hopper" },
	{ "L40", "ada" }, { "L20", "ada" }, { "L4", "ada" }, { "L2", "ada" },
	{ "A100", "ampere" }, { "A800", "ampere" }, { "A40", "ampere" }, { "A30", "ampere" },
	{ "A16", "ampere" }, { "A10", "ampere" }, { "A2", "ampere" },
	{ "A6000", "ampere" }, { "A5500", "ampere" }, { "A5000", "ampere" }, { "A4500", "ampere" },
	{ "A4000", "ampere" }, { "A2000", "ampere" },
	{ "T4", "turing" }, { "T1000", "turing" }, { "T600", "turing" }, { "T400", "turing" },
	{ "V100", "volta" }, { "GV100", "volta" },
	{ "P100", "pascal" }, { "P40", "pascal" }, { "P6000", "pascal" }, { "P4", "pascal" },
};

static const char *nvidia_arch_from_name(const char *name)
{
	struct toks tk;
	split_name(name, &tk);
	if (has_tok(&tk, "Blackwell"))
		return "blackwell";
	if (has_tok(&tk, "Hopper"))
		return "hopper";
	if (has_tok(&tk, "Ada"))
		return "ada";
	if (has_tok(&tk, "Quadro") && has_tok(&tk, "RTX"))
		return "turing";
	if (has_tok(&tk, "TITAN")) {
		if (has_tok(&tk, "RTX"))
			return "turing";
		if (has_tok(&tk, "V"))
			return "volta";
	}
	for (size_t i = 0; i < sizeof(nvidia_models) / sizeof(nvidia_models[0]); i++) {
		if (has_model(&tk, nvidia_models[i].model))
			return nvidia_models[i].arch;
	}
	int s = series_after(&tk, "RTX");
	if (s < 0)
		s = series_after(&tk, "GTX");
	switch (s) {
	case 50:
		return "blackwell";
	case 40:
		return "ada";
	case 30:
		return "ampere";
	case 20:
	case 16:
		return "turing";
	case 10:
		return "pascal";
	default:
		return "";
	}
}

const char *agent_nvidia_arch(const char *compute_cap, const char *name)
{
	const char *a = nvidia_arch_from_cc(compute_cap);
	return *a ? a : nvidia_arch_from_name(name);
}

double agent_nvlink_gbps(const char *arch, const char *compute_cap, const char *name, int *max_links)
{
	*max_links = 0;
	if (!arch || !*arch)
		return 0;      /* unknown generation: the caller's fallback rate */
	struct toks tk;
	split_name(name, &tk);
	if (!strcmp(arch, "pascal")) {
		*max_links = 4;
		return 40.0;
	}
	if (!strcmp(arch, "volta")) {
		*max_links = 6;
		return 50.0;
	}
	if (!strcmp(arch, "turing")) {
		*max_links = 2;
		return 50.0;
	}
	if (!strcmp(arch, "ampere")) {
		bool ga100 = (compute_cap && !strcmp(compute_cap, "8.0")) || has_model(&tk, "A100") ||
			     has_model(&tk, "A800") || has_model(&tk, "A30");
		if (ga100) {
			*max_links = 12;
			return 50.0;
		}
		*max_links = 4;      /* GA102: RTX 3090, A40, RTX A6000 */
		return 28.125;
	}
	if (!strcmp(arch, "hopper")) {
		*max_links = 18;
		return 50.0;
	}
	if (!strcmp(arch, "blackwell")) {
		*max_links = 18;
		return 100.0;
	}
	return 0.0;              /* ada and others: no NVLink */
}

/* ---- AMD ---- */

static char hexdigit(int v)
{
	return (char)(v < 10 ? '0' + v : 'a' + (v - 10));
}

bool agent_amd_gfx(const char *s, char *out, size_t len)
{
	if (!s || !len)
		return false;
	while (*s == ' ' || *s == '\t')
		s++;
	if (strncasecmp(s, "gfx", 3))
		return false;
	const char *b = s + 3;
	size_t n = 0;
	bool digits = true;
	while (isalnum((unsigned char)b[n])) {
		if (!isdigit((unsigned char)b[n]))
			digits = false;
		n++;
	}
	if (n < 3 || n > 6 || (b[n] && b[n] != ':' && b[n] != ' ' && b[n] != '\t'))
		return false;
	char body[8];
	if (digits && n == 4 && b[0] == '9') {
		/* rocm-smi's old form: major 9, minor, two-digit stepping ("9010" -> 90a) */
		int step = (b[2] - '0') * 10 + (b[3] - '0');
		if (step > 15)
			return false;
		snprintf(body, sizeof(body), "9%c%c", b[1], hexdigit(step));
	} else if (digits && n == 5 && b[0] == '1') {
		/* "11000" -> 1100, "10300" -> 1030 */
		int step = (b[3] - '0') * 10 + (b[4] - '0');
		if (step > 15)
			return false;
		snprintf(body, sizeof(body), "%c%c%c%c", b[0], b[1], b[2], hexdigit(step));
	} else if (n == 3 || n == 4) {
		for (size_t i = 0; i < n; i++)
			body[i] = (char)tolower((unsigned char)b[i]);
		body[n] = '\0';
	} else {
		return false;
	}
	snprintf(out, len, "gfx%s", body);
	return true;
}

const char *agent_amd_family(const char *gfx)
{
	static const struct {
		const char *prefix;
		const char *family;
	} t[] = {
		{ "gfx950", "cdna4" }, { "gfx94", "cdna3" }, { "gfx90a", "cdna2" }, { "gfx908", "cdna" },
		{ "gfx906", "gcn5" }, { "gfx900", "gcn5" }, { "gfx12", "rdna4" }, { "gfx11", "rdna3" },
		{ "gfx103", "rdna2" }, { "gfx101", "rdna" },
	};
	for (size_t i = 0; gfx && i < sizeof(t) / sizeof(t[0]); i++) {
		if (!strncmp(gfx, t[i].prefix, strlen(t[i].prefix)))
			return t[i].family;
	}
	return "";
}

double agent_xgmi_gbps(const char *gfx, const char *model)
{
	struct toks tk;
	split_name(model, &tk);
	if (!gfx)
		return 0;
	if (!strcmp(gfx, "gfx950"))
		return 1075.2;       /* MI350X/MI355X: 7 links x 153.6 GB/s */
	if (!strncmp(gfx, "gfx94", 5))
		return 896.0;        /* MI300X/MI325X: 7 links x 128 GB/s */
	if (!strcmp(gfx, "gfx90a")) {
		if (has_model(&tk, "MI210"))
			return 300.0;    /* Infinity Fabric Link bridge, 3 links x 100 GB/s */
		return 400.0;        /* MI250/MI250X: 800 GB/s per OAM, two GCDs */
	}
	if (!strcmp(gfx, "gfx908"))
		return 276.0;        /* MI100: 3 links x 92 GB/s */
	if (!strcmp(gfx, "gfx906"))
		return 184.0;        /* MI50/MI60: 2 links x 92 GB/s */
	return 0;
}

/* ---- Intel ---- */

unsigned agent_pci_id_in_name(const char *name)
{
	const char *b = name ? strstr(name, "[0x") : NULL;
	if (!b)
		return 0;
	b += 3;
	const char *end;
	unsigned v = agent_text_hex(b, 4, &end);
	return (end - b >= 3 && *end == ']') ? v : 0;
}

static const char *intel_arch_from_id(unsigned id)
{
	if ((id >= 0x0bd0 && id <= 0x0bdb) || id == 0x0b69 || id == 0x0b6e)
		return "xe-hpc";     /* Ponte Vecchio: Data Center GPU Max */
	if (id >= 0x5690 && id <= 0x56c2)
		return "xe-hpg";     /* DG2 / Alchemist: Arc A, Data Center GPU Flex */
	if (id >= 0xe202 && id <= 0xe22f)
		return "xe2-hpg";    /* Battlemage: Arc B, Arc Pro B */
	if (id == 0x020a)
		return "xe-hp";      /* XeHP SDV */
	return "";
}

const char *agent_intel_arch(const char *name, unsigned pci_device_id)
{
	struct toks tk;
	split_name(name, &tk);
	const char *s = name ? name : "";
	if (strstr(s, "Data Center GPU Max"))
		return "xe-hpc";
	if (strstr(s, "Data Center GPU Flex"))
		return "xe-hpg";
	for (int i = 0; i + 1 < tk.n; i++) {
		if (!agent_text_iprefix(tk.t[i], "Arc"))
			continue;
		int j = i + 1;
		if (agent_text_ieq(tk.t[j], "TM") && j + 1 < tk.n)
			j++;
		if (agent_text_ieq(tk.t[j], "Pro") && j + 1 < tk.n)
			j++;
		const char *next = tk.t[j];
		if ((next[0] == 'A' || next[0] == 'a') && isdigit((unsigned char)next[1]))
			return "xe-hpg";
		if ((next[0] == 'B' || next[0] == 'b') && isdigit((unsigned char)next[1]))
			return "xe2-hpg";
	}
	unsigned id = pci_device_id ? pci_device_id : agent_pci_id_in_name(s);
	const char *a = intel_arch_from_id(id);
	if (*a)
		return a;
	if (strstr(s, "Iris") || strstr(s, "UHD") || strstr(s, "HD Graphics"))
		return strstr(s, "Gen9") ? "gen9" : "xe-lp";
	return "";
}

bool agent_intel_integrated(const char *name, const char *arch)
{
	const char *s = name ? name : "";
	if (arch && (!strcmp(arch, "xe-lp") || !strcmp(arch, "gen9")))
		return true;
	return strstr(s, "Iris") || strstr(s, "UHD") || strstr(s, "HD Graphics") ||
	       strstr(s, "Gen9") || strstr(s, "Gen12");
}
