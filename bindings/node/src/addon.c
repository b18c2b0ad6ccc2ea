/* addon.c: the entry point of clade's Node-API addon: registers the
   one-to-one calls of model.c, tree.c, sampler.c and generate.c, plus the
   header's constants the JS layer needs. */
#include "common.h"

static void set_int(napi_env env, napi_value obj, const char *key, int64_t v) {
  set_named(env, obj, key, js_int(env, v));
}

static napi_value init(napi_env env, napi_value exports) {
  env_init(env);
  init_model(env, exports);
  init_tree(env, exports);
  init_sampler(env, exports);
  init_generate(env, exports);
  napi_value c;
  napi_create_object(env, &c);
#define C(name) set_int(env, c, #name, name)
  C(CLADE_VERSION_MAJOR); C(CLADE_VERSION_MINOR); C(CLADE_VERSION_PATCH);
  C(CLADE_VERSION_NUMBER); C(CLADE_ABI_MAJOR);
  C(CLADE_OK); C(CLADE_CACHE_FULL); C(CLADE_STOPPED); C(CLADE_BUFFER_SMALL);
  C(CLADE_KV_BUDGET); C(CLADE_CONTEXT_FULL); C(CLADE_E_INVALID_ARG); C(CLADE_E_NOMEM);
  C(CLADE_E_IO); C(CLADE_E_FORMAT); C(CLADE_E_UNSUPPORTED); C(CLADE_E_TOKEN);
  C(CLADE_E_STATE); C(CLADE_E_BACKEND); C(CLADE_E_UTF8); C(CLADE_E_MISMATCH);
  C(CLADE_E_INTERNAL);
  C(CLADE_LOG_DEBUG); C(CLADE_LOG_INFO); C(CLADE_LOG_WARN); C(CLADE_LOG_ERROR);
  C(CLADE_BACKEND_CPU); C(CLADE_BACKEND_CUDA);
  C(CLADE_KV_DEFAULT); C(CLADE_KV_F32); C(CLADE_KV_F16); C(CLADE_KV_BF16);
  C(CLADE_ATTENTION_AUTO); C(CLADE_ATTENTION_SHARED); C(CLADE_ATTENTION_FLAT);
  C(CLADE_ATTENTION_NONE);
  C(CLADE_TOKENIZE_ADD_SPECIAL); C(CLADE_TOKENIZE_PARSE_SPECIAL);
  C(CLADE_TREE_ALLOW_LONG_CONTEXT); C(CLADE_TREE_PREFIX_CACHE);
  C(CLADE_SEQ_PRIVATE);
  C(CLADE_GENERATE_CONTINUE); C(CLADE_GENERATE_STOP_SEQ); C(CLADE_GENERATE_STOP_ALL);
#undef C
  set_int(env, c, "CLADE_ITEM_NODE_0", CLADE_ITEM_NODE(0));
  set_named(env, exports, "constants", c);
  return exports;
}

NAPI_MODULE(clade, init)
