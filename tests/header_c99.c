/* The public header compiles alone as C99 (with -pedantic -Werror). */
#include <clade/clade.h>

int main(void) {
  clade_model_params p;
  clade_model_params_init(&p);
  return clade_version_number() == CLADE_VERSION_NUMBER ? 0 : 1;
}
