/* Checks for the tests written in C against hal.h: EXPECT, ok() for a hal_error*, alloc().
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
