// The C boundary of clade_detokenizer: text from a stream of tokens, one
// token at a time.
#include "api/handles.h"

using namespace clade::api;

extern "C" {

clade_status clade_detokenizer_create(const clade_model* model, int32_t special, int32_t first_in_text,
                                      clade_detokenizer** out) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(out, "out is NULL");
    *out = nullptr;
    const clade::Tokenizer* tok = tokenizer_of(model);
    std::unique_ptr<clade_detokenizer> d(new clade_detokenizer());
    d->d.reset(new clade::DetokenizeStream(*tok, special != 0, first_in_text != 0));
    d->model = model;
    model->refs++;
    *out = d.release();
    return CLADE_OK;
  });
}

clade_status clade_detokenizer_push(clade_detokenizer* detok, clade_token token, const char** text, size_t* len) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(detok && text && len, "detok, text or len is NULL");
    detok->out = detok->d->push(token);
    *text = detok->out.data();
    *len = detok->out.size();
    return CLADE_OK;
  });
}

clade_status clade_detokenizer_flush(clade_detokenizer* detok, const char** text, size_t* len) {
  return guard([&]() -> clade_status {
    CLADE_CHECK_ARG(detok && text && len, "detok, text or len is NULL");
    detok->out = detok->d->flush();
    *text = detok->out.data();
    *len = detok->out.size();
    return CLADE_OK;
  });
}

void clade_detokenizer_free(clade_detokenizer* detok) {
  if (!detok) return;
  const clade_model* model = detok->model;
  delete detok;
  unref_model(model);
}

}  // extern "C"
