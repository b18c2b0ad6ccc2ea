// The public header compiles alone as C++ (with -pedantic -Werror).
#include <clade/clade.h>

int main() {
  clade_batch b;
  clade_batch_init(&b);
  return clade_version_number() == CLADE_VERSION_NUMBER && b.size == sizeof b ? 0 : 1;
}
