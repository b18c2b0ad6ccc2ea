// `clade tokenize`: a text's token ids or pieces.
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"

namespace cli {

int cmd_tokenize(Args& a) {
  std::string model, file, text;
  bool bos = true, special = false, pieces = false, have_text = false;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-m") model = a.next(f);
    else if (f == "--no-bos") bos = false;
    else if (f == "--special") special = true;
    else if (f == "--pieces") pieces = true;
    else if (f == "--file") file = a.next(f);
    else if (!f.empty() && f[0] == '-' && f.size() > 1) unknown_arg("tokenize", f);
    else if (have_text) Args::die("tokenize: unexpected argument '" + f + "' after TEXT '" + text + "' (quote the text)");
    else {
      text = f;
      have_text = true;
    }
  }
  if (model.empty()) Args::die("tokenize: -m FILE is required");
  if (!file.empty() && have_text) Args::die("tokenize: give TEXT or --file PATH, not both");
  if (!file.empty()) text = read_all(file);
  else if (!have_text) Args::die("tokenize: give TEXT or --file PATH");
  clade_model* m = load_model(model, 1, true, CLADE_BACKEND_CPU);
  std::vector<clade_token> ids = tokenize(m, text, bos, special);
  std::string line;
  for (size_t i = 0; i < ids.size(); i++) {
    if (i) line += ' ';
    line += pieces ? piece(m, ids[i]) : std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  clade_model_free(m);
  return 0;
}

}  // namespace cli
