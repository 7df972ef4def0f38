/* example_gpt [TEXT [STEPS [THREADS]]]: trains a character-level GPT on
 * TEXT (default /usr/share/common-licenses/GPL-3) for STEPS steps (300),
 * printing the loss and steps/second, then prints a short sample. */
#include <stdlib.h>

#include "gpt.h"

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "/usr/share/common-licenses/GPL-3";
  int steps = argc > 2 ? atoi(argv[2]) : 300;
  int threads = argc > 3 ? atoi(argv[3]) : 0;
  return gpt_run(path, steps > 0 ? steps : 300, 25, threads, 200);
}
