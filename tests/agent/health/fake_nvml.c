/* A fake libnvidia-ml for the GPU check's tests: the entry points the check binds, with
 * answers scripted in the file named by $SG_FAKE_NVML_SCRIPT, re-read on every call so a
 * test can change them between runs. One "key value" per line:
 *   init <rc>   count <n>   count_rc <rc>
 *   gpu<i>.handle_rc <rc>   gpu<i>.name <text>   gpu<i>.ecc <n>   gpu<i>.ecc_rc <rc>
 *   gpu<i>.remap_rc <rc>   gpu<i>.remap_pending <0|1>   gpu<i>.remap_failure <0|1>
 *   gpu<i>.retired_rc <rc>   gpu<i>.retired_pending <0|1>
 * Missing keys read as 0 (success). A "%n" in the path is replaced by $SLURMD_NODENAME, so that
 * the nodes of one Slurm job on one machine (tests/slurm) read scripts of their own.
 * Not thread-safe; tests are single-threaded. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nvmlDevice_st* nvmlDevice_t;

int fake_nvml_init_calls = 0;
int fake_nvml_shutdown_calls = 0;

/* Copies the value of `key` into `out` (at most `size` bytes); 1 when found. */
static int lookup(const char* key, char* out, size_t size) {
  const char* script = getenv("SG_FAKE_NVML_SCRIPT");
  if (script == NULL) return 0;
  char path[4096];
  const char* mark = strstr(script, "%n");
  const char* node = getenv("SLURMD_NODENAME");
  if (mark != NULL)
    snprintf(path, sizeof path, "%.*s%s%s", (int)(mark - script), script, node ? node : "",
             mark + 2);
  else
    snprintf(path, sizeof path, "%s", script);
  FILE* f = fopen(path, "r");
  if (f == NULL) return 0;
  char line[256];
  int found = 0;
  size_t klen = strlen(key);
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, key, klen) != 0 || line[klen] != ' ') continue;
    const char* v = line + klen + 1;
    size_t n = strcspn(v, "\n");
    if (n >= size) n = size - 1;
    memcpy(out, v, n);
    out[n] = '\0';
    found = 1;
  }
  fclose(f);
  return found;
}

static int value(const char* key) {
  char buf[64];
  return lookup(key, buf, sizeof buf) ? atoi(buf) : 0;
}

static int gpu_value(nvmlDevice_t dev, const char* field) {
  char key[64];
  snprintf(key, sizeof key, "gpu%u.%s", (unsigned)((uintptr_t)dev - 1), field);
  return value(key);
}

int nvmlInit_v2(void) {
  ++fake_nvml_init_calls;
  return value("init");
}

int nvmlShutdown(void) {
  ++fake_nvml_shutdown_calls;
  return 0;
}

const char* nvmlErrorString(int rc) {
  switch (rc) {
    case 0:
      return "Success";
    case 3:
      return "Not Supported";
    case 9:
      return "Driver Not Loaded";
    case 15:
      return "GPU is lost";
    case 18:
      return "RM has detected an NVML/RM version mismatch";
    default:
      return "Unknown Error";
  }
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = (unsigned int)value("count");
  return value("count_rc");
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  char key[64];
  snprintf(key, sizeof key, "gpu%u.handle_rc", index);
  int rc = value(key);
  if (rc == 0) *device = (nvmlDevice_t)(uintptr_t)(index + 1);
  return rc;
}

int nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  char key[64];
  snprintf(key, sizeof key, "gpu%u.name", (unsigned)((uintptr_t)device - 1));
  if (!lookup(key, name, length)) snprintf(name, length, "Fake GPU");
  return 0;
}

int nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type, int counter_type,
                                unsigned long long* count) {
  /* Only uncorrected (1) volatile (0) counts are scripted. */
  *count =
      (error_type == 1 && counter_type == 0) ? (unsigned long long)gpu_value(device, "ecc") : 0;
  return gpu_value(device, "ecc_rc");
}

int nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corr, unsigned int* unc,
                              unsigned int* pending, unsigned int* failure) {
  *corr = 0;
  *unc = (unsigned int)gpu_value(device, "remap_failure") * 2;
  *pending = (unsigned int)gpu_value(device, "remap_pending");
  *failure = (unsigned int)gpu_value(device, "remap_failure");
  return gpu_value(device, "remap_rc");
}

int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int* pending) {
  *pending = gpu_value(device, "retired_pending");
  return gpu_value(device, "retired_rc");
}
