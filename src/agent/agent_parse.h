/*
 * agent_parse: pure parsers for the output of the vendor tools. Each takes
 * the tool's text (NUL-terminated) and fills a caller-owned struct; on
 * output it cannot trust (garbage, cut short, an error message instead of
 * data) it returns -1 with one line in err. No I/O, no globals, no
 * allocation except inside cJSON for the JSON forms; safe to fuzz.
 *
 * The formats, with the recorded outputs the tests use, are described in
 * docs/agent.md and test/fixtures/agent/README.md.
 */
#ifndef GPU_AGENT_PARSE_H
#define GPU_AGENT_PARSE_H

#include "agent.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------- NVIDIA: nvidia-smi ---------------- */

enum nvsmi_tri { NVSMI_UNKNOWN = 0, NVSMI_NO, NVSMI_YES };

struct nvsmi_row {
	int index;                   /* "index" column, else the row number */
	char uuid[96];
	char name[64];
	char driver[32];
	char pci_bus[32];
	char compute_cap[8];
	bool have_memory;
	uint32_t memory_mib;         /* memory.total */
	enum nvsmi_tri mig;          /* mig.mode.current Enabled / Disabled / [N/A] */
	int64_t ecc_uncorrected;     /* ecc.errors.uncorrected.volatile.total; -1 unknown */
	enum nvsmi_tri retired_pending;  /* retired_pages.pending */
	enum nvsmi_tri remap_pending;    /* remapped_rows.pending */
	enum nvsmi_tri remap_failure;    /* remapped_rows.failure */
	char fault[64];              /* a cell like "[GPU is lost]" or "ERR!", verbatim */
};

#define NVSMI_MAX_LOST 16

struct nvsmi_query {
	int nrow;
	struct nvsmi_row row[AGENT_MAX_GPUS];
	int ncol;                    /* columns in the header (or in fields) */
	int nlost;                   /* "Unable to determine the device handle for GPU <bus>: ..." */
	char lost[NVSMI_MAX_LOST][96];
};

/*
 * nvidia-smi --query-gpu=... --format=csv[,nounits][,noheader]. Columns
 * are found by name in the header line (units like " [MiB]" are ignored);
 * for noheader output pass the queried list in fields ("index,uuid,..."),
 * else NULL. Cells may carry units ("81559 MiB"). Unknown columns are
 * ignored. Errors: no header and no fields, a row with the wrong number of
 * cells, output that stops mid-line, a bad number in index/memory.total.
 */
int nvsmi_parse_query(const char *text, const char *fields, struct nvsmi_query *q,
		      char *err, size_t errlen);

struct nvsmi_mig {
	int dev;                     /* MIG device index within its GPU */
	char profile[24];            /* "3g.40gb" */
	char uuid[96];               /* "MIG-..." (or "MIG-GPU-.../gi/ci" on old drivers) */
};

struct nvsmi_list_gpu {
	int index;
	char name[64];
	char uuid[96];
	int nmig;
	struct nvsmi_mig mig[AGENT_MAX_MIG];
};

struct nvsmi_list {
	int ngpu;
	struct nvsmi_list_gpu gpu[AGENT_MAX_GPUS];
};

/* nvidia-smi -L: "GPU 0: NAME (UUID: GPU-...)" and indented "MIG ..." lines. */
int nvsmi_parse_list(const char *text, struct nvsmi_list *l, char *err, size_t errlen);

struct nvsmi_mig_mem {
	int gpu, gi, ci, dev;
	uint32_t total_mib;
};

struct nvsmi_mig_table {
	int n;
	struct nvsmi_mig_mem m[AGENT_MAX_GPUS];
};

/*
 * The "MIG devices:" table of plain nvidia-smi: per MIG device, its memory
 * ("26MiB / 40448MiB" -> 40448). Output without that table gives n = 0.
 */
int nvsmi_parse_mig_table(const char *text, struct nvsmi_mig_table *t, char *err, size_t errlen);

/*
 * nvidia-smi topo -m: the GPU x GPU part of the matrix (NIC rows and
 * columns, affinity columns and the legend are skipped). Cells: X, NV#,
 * PIX, PXB, PHB, NODE, SYS, SOC. Errors: no matrix, a GPU row with too
 * few cells, an unknown cell, rows that do not match the columns.
 */
int nvsmi_parse_topo(const char *text, struct agent_topo *t, char *err, size_t errlen);

/* ---------------- AMD: rocminfo, rocm-smi ---------------- */

struct rocm_agent {
	int node;                    /* HSA node ("Node:") */
	char gfx[24];                /* "gfx90a" (feature suffixes dropped) */
	char marketing[64];          /* "AMD Instinct MI210" */
	char uuid[96];               /* "GPU-29273e62ca00396c" */
	char pci_bus[32];            /* from BDFID: "0000:e3:00.0" (domain 0 assumed) */
	unsigned chip_id;
	uint32_t vram_mib;           /* first GLOBAL coarse-grained pool */
};

struct rocm_info {
	char driver[32];             /* "ROCk module version X is loaded"; "" if not said */
	int n;                       /* GPU agents only, in order */
	struct rocm_agent gpu[AGENT_MAX_GPUS];
};

/* rocminfo. Errors: no "HSA Agents" block, output cut before "*** Done ***". */
int rocm_parse_rocminfo(const char *text, struct rocm_info *ri, char *err, size_t errlen);

struct rocm_card {
	int card;                    /* cardN / GPU[N] */
	char series[64];             /* "Card Series" */
	char model[32];              /* "Card Model" (a PCI id on newer versions) */
	char gfx[24];                /* "GFX Version", normalised */
	char device_name[64];        /* "Device Name" (rocm-smi -a) */
	char unique_id[40];
	char pci_bus[32];
	uint64_t vram_bytes;         /* "VRAM Total Memory (B)" */
	int node_id;                 /* "Node ID", -1 unknown */
};

struct rocm_smi {
	char driver[32];
	int n;
	struct rocm_card card[AGENT_MAX_GPUS];
};

/*
 * rocm-smi key/value output: the --json form ({"card0": {...}, "system":
 * {...}}) or the text form ("GPU[0]  : Card Series:  ..."), several
 * sections concatenated are fine. Errors: JSON that does not parse, text
 * with no GPU records at all (unless it is a bare banner).
 */
int rocm_parse_smi(const char *text, struct rocm_smi *s, char *err, size_t errlen);

/*
 * rocm-smi --showtopo / --showtopotype: the "Link Type between two GPUs"
 * matrix (text), or the JSON form with "(Topology) Link type between DRM
 * devices i and j" keys. Cells XGMI, PCIE, 0 (self); "XXXX"/"N/A" unknown.
 */
int rocm_parse_topo(const char *text, struct agent_topo *t, char *err, size_t errlen);

/* ---------------- Intel: clinfo, xpu-smi ---------------- */

struct clinfo_dev {
	char platform[64];
	char name[64];
	char vendor[48];
	char driver[32];
	char uuid[48];
	char pci_bus[32];            /* "Device PCI bus info (KHR)" */
	uint64_t global_mem;         /* bytes; 0 unknown */
	int is_gpu;                  /* 1 GPU, 0 other, -1 not said */
	int unified_mem;             /* "Unified memory for Host and Device": 1/0/-1 */
	int available;               /* "Device Available": 1/0/-1 */
	unsigned pci_device_id;      /* from "[0x56a0]" in the name, else 0 */
};

struct clinfo_out {
	int n;
	struct clinfo_dev dev[AGENT_MAX_GPUS];
};

/*
 * clinfo (the default human-readable form; also "clinfo | grep" extracts
 * and "clinfo -d p:d"). Every "Device Name" line starts a device; the
 * trailing "NULL platform behavior" and "ICD loader" sections are ignored.
 * Errors: text with no device at all.
 */
int clinfo_parse(const char *text, struct clinfo_out *c, char *err, size_t errlen);

struct xpusmi_dev {
	int id;
	char name[64];
	char uuid[64];
	char pci_bus[32];
	unsigned pci_device_id;
	uint64_t mem_bytes;          /* "Memory Physical Size", 0 unknown */
	char driver[32];
};

struct xpusmi_out {
	int n;
	struct xpusmi_dev dev[AGENT_MAX_GPUS];
};

/* xpu-smi discovery [-d N] [-j]: the boxed table or the JSON. */
int xpusmi_parse_discovery(const char *text, struct xpusmi_out *x, char *err, size_t errlen);

#endif
