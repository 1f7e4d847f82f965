/* Checks for the tests written in C against hal.h: EXPECT, ok() for a hal_error*, REFUSED() for
 * an error expected, alloc().
 * A test that looks the hal_* functions up with dlsym defines their names as macros naming
 * its function pointers before including this. */
#ifndef HALCYON_TESTS_C_CHECK_H_
#define HALCYON_TESTS_C_CHECK_H_

#include <halcyon/hal.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;
#define EXPECT(cond, ...)                                   \
  do {                                                      \
    if (!(cond)) {                                          \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);      \
      fprintf(stderr, __VA_ARGS__);                         \
      fprintf(stderr, "\n");                                \
      ++failures;                                           \
    }                                                       \
  } while (0)

/* 1 on success; otherwise prints the error, frees it and counts a failure. */
static int ok(hal_error* e, const char* what) {
  if (!e) return 1;
  fprintf(stderr, "%s: %s: %s\n", what, hal_status_name(hal_error_status(e)), hal_error_message(e));
  hal_error_free(e);
  ++failures;
  return 0;
}

/* REFUSED(e, status, text, what): 1 when e is an error of `status` whose message contains `text`
 * (NULL: any message); otherwise prints what came instead and counts a failure. Frees e.
 * (inline: a test that never expects an error includes this without an unused-function warning) */
#define REFUSED(e, status, text, what) refused_at(__FILE__, __LINE__, (e), (status), (text), (what))
static inline int refused_at(const char* file, int line, hal_error* e, hal_status status, const char* text, const char* what) {
  const int as_expected = e && hal_error_status(e) == status && (!text || strstr(hal_error_message(e), text));
  if (!as_expected) {
    fprintf(stderr, "%s:%d: %s: expected %s%s%s%s, got %s: %s\n", file, line, what, hal_status_name(status),
            text ? " with '" : "", text ? text : "", text ? "'" : "", e ? hal_status_name(hal_error_status(e)) : "success",
            hal_error_message(e));
    ++failures;
  }
  hal_error_free(e);
  return as_expected;
}

static hal_buffer alloc(hal_device d, uint64_t bytes) {
  hal_buffer_desc bd;
  memset(&bd, 0, sizeof bd);
  bd.struct_size = sizeof bd;
  bd.kind = HAL_MEMORY_DEVICE;
  bd.size = bytes;
  hal_buffer b = NULL;
  ok(hal_buffer_create(d, &bd, &b), "hal_buffer_create");
  return b;
}

#endif /* HALCYON_TESTS_C_CHECK_H_ */
