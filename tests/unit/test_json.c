/* The JSON writer (base/json.h): nesting and commas, escapes, invalid
 * UTF-8 replaced, non-finite numbers as null, unbalanced nesting refused.
 * Python's json module parses the reports in tests/api; here the exact text. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/json.h"
#include "check.h"

static void expect_text(kiln_json *j, const char *want, const char *what) {
  char *got = NULL;
  if (!ok(kiln_json_finish(j, &got), what)) return;
  CHECK(!strcmp(got, want), "%s:\n  got  %s\n  want %s", what, got, want);
  free(got);
}

int main(void) {
  kiln_json j = {0};
  kiln_json_object_begin(&j, NULL);
  kiln_json_string(&j, "s", "q\"b\\n\nt\tc\x01\x7f");
  kiln_json_int(&j, "i", -42);
  kiln_json_double(&j, "d", 0.5);
  kiln_json_double(&j, "nan", NAN);
  kiln_json_double(&j, "inf", -INFINITY);
  kiln_json_bool(&j, "t", true);
  kiln_json_null(&j, "n");
  kiln_json_string(&j, "null_string", NULL);
  kiln_json_array_begin(&j, "a");
  kiln_json_int(&j, NULL, 1);
  kiln_json_object_begin(&j, NULL);
  kiln_json_object_end(&j);
  kiln_json_array_begin(&j, NULL);
  kiln_json_array_end(&j);
  kiln_json_array_end(&j);
  kiln_json_object_end(&j);
  expect_text(&j,
              "{\"s\":\"q\\\"b\\\\n\\nt\\tc\\u0001\\u007f\",\"i\":-42,\"d\":0.5,\"nan\":null,\"inf\":null,"
              "\"t\":true,\"n\":null,\"null_string\":null,\"a\":[1,{},[]]}",
              "object");

  /* UTF-8: valid sequences pass through; a stray continuation byte, a
   * truncated sequence, an overlong form and a surrogate become U+FFFD. */
  kiln_json_string(&j, NULL, "\xc3\xa9\xe2\x9c\x93\xf0\x9f\x94\xa5|\x80|\xe2\x9c|\xc0\xaf|\xed\xa0\x80|");
  expect_text(&j,
              "\"\xc3\xa9\xe2\x9c\x93\xf0\x9f\x94\xa5|\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd|"
              "\\ufffd\\ufffd\\ufffd|\"",
              "utf-8");

  /* A key that needs escaping. */
  kiln_json_object_begin(&j, NULL);
  kiln_json_int(&j, "k\"ey", 1);
  kiln_json_object_end(&j);
  expect_text(&j, "{\"k\\\"ey\":1}", "escaped key");

  /* Unbalanced or too deep: an error, no text. */
  char *text = (char *)"untouched";
  kiln_json_object_begin(&j, NULL);
  kiln_status_t st = kiln_json_finish(&j, &text);
  CHECK(st && kiln_status_code_of(st) == KILN_INTERNAL && text == NULL, "an unclosed object was accepted");
  kiln_status_free(st);
  kiln_json_array_end(&j);
  st = kiln_json_finish(&j, &text);
  CHECK(st != NULL, "closing more than was opened was accepted");
  kiln_status_free(st);
  for (int i = 0; i < KILN_JSON_MAX_DEPTH + 1; i++) kiln_json_array_begin(&j, NULL);
  for (int i = 0; i < KILN_JSON_MAX_DEPTH + 1; i++) kiln_json_array_end(&j);
  st = kiln_json_finish(&j, &text);
  CHECK(st != NULL, "nesting past KILN_JSON_MAX_DEPTH was accepted");
  kiln_status_free(st);

  printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
