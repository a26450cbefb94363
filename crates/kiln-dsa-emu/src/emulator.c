/* kiln's functional DSA emulator: DDR, each cluster's GB and each core's LB
   are separate memories; device code reaches DDR and GB only through
   handles and the DMA calls below, which copy boxes, merging contiguous
   runs (swTVM Algorithm 3), and count calls, runs and bytes per level.
   Cores run one after another; one run at a time per library (a mutex).
   Before this file: KILN_DSA_CLUSTERS, KILN_DSA_CORES (per cluster),
   KILN_DSA_LB_BYTES, KILN_DSA_GB_BYTES (0: no GB) and the DSA API. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KILN_DSA_TOTAL (KILN_DSA_CLUSTERS * KILN_DSA_CORES)
#define KILN_DSA_MAX_DIMS 16
enum { KILN_DDR = 0, KILN_GB = 1 };
/* Count slots: per transfer kind (DDR->LB, LB->DDR, DDR->GB, GB->LB, LB->GB)
   calls, contiguous runs and bytes; then host calls and barriers. */
enum { KILN_DDR_LB, KILN_LB_DDR, KILN_DDR_GB, KILN_GB_LB, KILN_LB_GB, KILN_KINDS };
#define KILN_DSA_COUNTS (3 * KILN_KINDS + 2)

typedef struct { unsigned char* data; int64_t bytes; uint32_t level; } kiln_region;
struct kiln_core { unsigned char* lb; struct kiln_dsa* dev; };
struct kiln_dsa {
  struct kiln_core cores[KILN_DSA_TOTAL];
  unsigned char* gb[KILN_DSA_CLUSTERS];
  kiln_region* regions;
  int64_t n_regions, cap_regions;
  int err;
  int64_t counts[KILN_DSA_COUNTS];
};

static struct kiln_dsa kiln_the_dsa;
static pthread_mutex_t kiln_dsa_lock = PTHREAD_MUTEX_INITIALIZER;
static int kiln_dsa_ready;

/* A memory filled with 0xFF bytes (NaN floats), so that data no DMA
   brought in reads as garbage. */
static unsigned char* kiln_dsa_poisoned(int64_t bytes) {
  unsigned char* p = (unsigned char*)malloc((size_t)bytes);
  if (p) memset(p, 0xFF, (size_t)bytes);
  return p;
}

/* The LBs; a cluster's GB is made when something is first staged there. */
static int kiln_dsa_init(struct kiln_dsa* d) {
  for (int64_t c = 0; c < KILN_DSA_TOTAL; ++c) {
    d->cores[c].lb = kiln_dsa_poisoned(KILN_DSA_LB_BYTES);
    if (!d->cores[c].lb) return 1;
    d->cores[c].dev = d;
  }
  return 0;
}

/* Frees every memory (a model using this library was dropped); the next
   run makes them again. */
void kiln_dsa_release(void) {
  pthread_mutex_lock(&kiln_dsa_lock);
  struct kiln_dsa* d = &kiln_the_dsa;
  for (int64_t c = 0; c < KILN_DSA_TOTAL; ++c) { free(d->cores[c].lb); d->cores[c].lb = NULL; }
  for (int64_t c = 0; c < KILN_DSA_CLUSTERS; ++c) { free(d->gb[c]); d->gb[c] = NULL; }
  free(d->regions);
  d->regions = NULL;
  d->n_regions = d->cap_regions = 0;
  kiln_dsa_ready = 0;
  pthread_mutex_unlock(&kiln_dsa_lock);
}

kiln_dsa* kiln_dsa_begin(void) {
  pthread_mutex_lock(&kiln_dsa_lock);
  struct kiln_dsa* d = &kiln_the_dsa;
  d->err = 0;
  if (!kiln_dsa_ready) {
    d->err = kiln_dsa_init(d);
    kiln_dsa_ready = !d->err;
  }
  d->n_regions = 0;
  return d;
}

static kiln_mem kiln_dsa_region(kiln_dsa* d, unsigned char* data, int64_t bytes, uint32_t level) {
  if (d->n_regions == d->cap_regions) {
    int64_t cap = d->cap_regions ? 2 * d->cap_regions : 64;
    kiln_region* r = (kiln_region*)realloc(d->regions, (size_t)cap * sizeof(kiln_region));
    if (!r) { d->err = 1; kiln_mem none = {level, UINT32_MAX}; return none; }
    d->regions = r;
    d->cap_regions = cap;
  }
  d->regions[d->n_regions].data = data;
  d->regions[d->n_regions].bytes = bytes;
  d->regions[d->n_regions].level = level;
  kiln_mem m = {level, (uint32_t)d->n_regions++};
  return m;
}

kiln_mem kiln_dsa_ddr(kiln_dsa* d, void* data, int64_t bytes) {
  return kiln_dsa_region(d, (unsigned char*)data, bytes, KILN_DDR);
}

static kiln_region* kiln_dsa_find(kiln_dsa* d, kiln_mem m) {
  if (m.id >= d->n_regions || d->regions[m.id].level != m.level) { d->err = 1; return NULL; }
  return &d->regions[m.id];
}

static void kiln_dsa_count(kiln_dsa* d, int kind, int64_t runs, int64_t bytes) {
  d->counts[3 * kind] += 1;
  d->counts[3 * kind + 1] += runs;
  d->counts[3 * kind + 2] += bytes;
}

kiln_mem kiln_dsa_stage(kiln_dsa* d, int64_t cluster, kiln_mem src, int64_t gb_offset, int64_t bytes) {
  kiln_region* r = kiln_dsa_find(d, src);
  if (!r || r->level != KILN_DDR || bytes > r->bytes || gb_offset < 0 || gb_offset + bytes > KILN_DSA_GB_BYTES) {
    d->err = 1;
    return src;
  }
  if (!d->gb[cluster] && !(d->gb[cluster] = kiln_dsa_poisoned(KILN_DSA_GB_BYTES))) {
    d->err = 1;
    return src;
  }
  memcpy(d->gb[cluster] + gb_offset, r->data, (size_t)bytes);
  kiln_dsa_count(d, KILN_DDR_GB, 1, bytes);
  return kiln_dsa_region(d, d->gb[cluster] + gb_offset, bytes, KILN_GB);
}

kiln_core* kiln_dsa_core(kiln_dsa* d, int64_t core) { return &d->cores[core]; }

unsigned char* kiln_lb(kiln_core* core, int64_t offset) {
  if (offset < 0 || offset >= KILN_DSA_LB_BYTES) { core->dev->err = 1; return core->lb; }
  return core->lb + offset;
}

void kiln_dsa_barrier(kiln_dsa* d) { d->counts[3 * KILN_KINDS + 1] += 1; }

int kiln_dsa_end(kiln_dsa* d) {
  int err = d->err;
  d->counts[3 * KILN_KINDS] += 1;
  pthread_mutex_unlock(&kiln_dsa_lock);
  return err;
}

/* Copies the box (clipped to the buffer) between buffer `r` and the dense LB
   array `lb` of extents `ext`, one contiguous run at a time: the innermost
   dimensions the box covers whole in both are one run. */
static void kiln_dma(kiln_core* core, unsigned char* lb, kiln_mem m, int nd, const int64_t* shape,
                     const int64_t* lo, const int64_t* ext, int elem, int put) {
  kiln_dsa* d = core->dev;
  kiln_region* r = kiln_dsa_find(d, m);
  if (!r || nd < 1 || nd > KILN_DSA_MAX_DIMS) { d->err = 1; return; }
  int64_t clo[KILN_DSA_MAX_DIMS], chi[KILN_DSA_MAX_DIMS], bs[KILN_DSA_MAX_DIMS], ls[KILN_DSA_MAX_DIMS];
  int64_t lb_elems = 1, buf_elems = 1;
  for (int k = nd - 1; k >= 0; --k) {
    clo[k] = lo[k] > 0 ? lo[k] : 0;
    chi[k] = lo[k] + ext[k] < shape[k] ? lo[k] + ext[k] : shape[k];
    if (chi[k] <= clo[k]) return;
    bs[k] = buf_elems; ls[k] = lb_elems;
    buf_elems *= shape[k]; lb_elems *= ext[k];
  }
  if (buf_elems * elem > r->bytes || lb < core->lb || lb + lb_elems * elem > core->lb + KILN_DSA_LB_BYTES) {
    d->err = 1;
    return;
  }
  int outer = nd - 1;
  while (outer > 0 && lo[outer] == 0 && ext[outer] == shape[outer]) --outer;
  int64_t run = chi[outer] - clo[outer];
  for (int k = outer + 1; k < nd; ++k) run *= shape[k];
  int64_t idx[KILN_DSA_MAX_DIMS], runs = 0;
  for (int k = 0; k < nd; ++k) idx[k] = clo[k];
  for (;;) {
    int64_t b = 0, l = 0;
    for (int k = 0; k < nd; ++k) { b += idx[k] * bs[k]; l += (idx[k] - lo[k]) * ls[k]; }
    unsigned char* bp = r->data + b * elem;
    unsigned char* lp = lb + l * elem;
    memcpy(put ? bp : lp, put ? lp : bp, (size_t)(run * elem));
    ++runs;
    int k = outer - 1;
    while (k >= 0 && ++idx[k] == chi[k]) { idx[k] = clo[k]; --k; }
    if (k < 0) break;
  }
  int kind = put ? (r->level == KILN_GB ? KILN_LB_GB : KILN_LB_DDR)
                 : (r->level == KILN_GB ? KILN_GB_LB : KILN_DDR_LB);
  kiln_dsa_count(d, kind, runs, runs * run * elem);
}

void kiln_dma_get(kiln_core* core, void* lb, kiln_mem src, int nd, const int64_t* shape,
                  const int64_t* lo, const int64_t* ext, int elem) {
  kiln_dma(core, (unsigned char*)lb, src, nd, shape, lo, ext, elem, 0);
}

void kiln_dma_put(kiln_core* core, kiln_mem dst, const void* lb, int nd, const int64_t* shape,
                  const int64_t* lo, const int64_t* ext, int elem) {
  kiln_dma(core, (unsigned char*)lb, dst, nd, shape, lo, ext, elem, 1);
}

/* The counters (KILN_DSA_COUNTS values), read and cleared by the host. */
void kiln_dsa_counts(int64_t* out, int clear) {
  pthread_mutex_lock(&kiln_dsa_lock);
  memcpy(out, kiln_the_dsa.counts, sizeof kiln_the_dsa.counts);
  if (clear) memset(kiln_the_dsa.counts, 0, sizeof kiln_the_dsa.counts);
  pthread_mutex_unlock(&kiln_dsa_lock);
}
