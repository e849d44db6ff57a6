/* edge_chat: a fine-tuned language model answering on the box.
 *
 *   edge_chat CHAT.sg PROMPT [MAX_TOKENS] [SYSTEM]
 *
 * CHAT.sg is a merged LoRA fine-tune exported for generation with its
 * tokenizer (docs/lora.md):
 *   sgrt export models/smollm2_lora.lua --checkpoint ck --merge --tokenizer FILE.gguf \
 *       --set batch=1 --set block=1024 --set kv_cache=true --set prefill_chunk=64 -o chat.sg
 * The prompt goes in as one user message of the model's chat template (after
 * SYSTEM's message when given); the greedy answer is printed as it comes.
 *
 * Plain C99, linked only against libsgrt. */
#include <stdio.h>
#include <stdlib.h>

#include "sgrt/sgrt.h"

static void print_piece(const char* text, size_t len, void* user) {
  (void)user;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
}

int main(int argc, char** argv) {
  sgrt_session* s = NULL;
  sgrt_generate_options o = {1, NULL, 200, 0.0, 0, 1.0, 1};
  int rc = 1;
  if (argc < 3 || argc > 5) {
    fprintf(stderr, "usage: edge_chat CHAT.sg PROMPT [MAX_TOKENS] [SYSTEM]\n");
    return 2;
  }
  if (argc > 3) o.max_tokens = atol(argv[3]);
  if (argc > 4) o.system = argv[4];
  if (sgrt_create(&s) != SGRT_OK || sgrt_load_file(s, argv[1], "cpu") != SGRT_OK ||
      sgrt_generate(s, argv[2], &o, print_piece, NULL) != SGRT_OK) {
    fprintf(stderr, "edge_chat: %s\n", sgrt_last_error());
  } else {
    putchar('\n');
    rc = 0;
  }
  sgrt_destroy(s);
  return rc;
}
