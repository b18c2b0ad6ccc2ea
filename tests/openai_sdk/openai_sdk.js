// The OpenAI SDK against clade serve (run by test_openai_sdk.sh): schema
// valid JSON through response_format, whole and streamed; a bad schema is
// a BadRequestError naming the keyword; logprobs with top_logprobs (the
// model's distribution, not the sampler's truncated one: 3 alternatives at
// temperature 0); n past the server's limit is a BadRequestError with the
// limit as its code. Exits 1 on a failure.
const OpenAI = require("openai");
const client = new OpenAI({ baseURL: process.env.CLADE_URL + "/v1", apiKey: "none" });
const schema = {
  type: "object",
  properties: { name: { type: "string", maxLength: 10 }, age: { type: "integer", minimum: 0, maximum: 99 } },
  required: ["name", "age"],
  additionalProperties: false,
};
const response_format = { type: "json_schema", json_schema: { name: "person", schema, strict: true } };
const messages = [{ role: "user", content: "A person, as JSON" }];
let failures = 0;
function check(cond, msg) {
  if (!cond) {
    console.log("FAIL: " + msg);
    failures++;
  }
}
function valid(text) {
  try {
    const v = JSON.parse(text);
    return Object.keys(v).sort().join(",") === "age,name" && Number.isInteger(v.age) && v.age >= 0 && v.age <= 99 &&
      typeof v.name === "string" && [...v.name].length <= 10;
  } catch (e) {
    return false;
  }
}
(async () => {
  const r = await client.chat.completions.create({ model: "m", messages, response_format, n: 3, max_tokens: 150,
                                                   temperature: 1, seed: 3 });
  let finished = 0;
  for (const c of r.choices) {
    if (c.finish_reason !== "stop") continue;
    finished++;
    check(valid(c.message.content), "choice " + c.index + ": " + JSON.stringify(c.message.content));
  }
  check(finished > 0, "no choice finished: " + JSON.stringify(r.choices));
  const stream = await client.chat.completions.create({ model: "m", messages, response_format, max_tokens: 150,
                                                        temperature: 0, stream: true });
  let text = "", reason = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    text += c.delta?.content ?? "";
    reason = c.finish_reason ?? reason;
  }
  check(reason !== "stop" || valid(text), "streamed: " + JSON.stringify(text));
  try {
    await client.chat.completions.create({ model: "m", messages, max_tokens: 10, response_format: {
      type: "json_schema", json_schema: { name: "x", schema: { type: "array", uniqueItems: true } } } });
    check(false, "a schema with uniqueItems was accepted");
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && /uniqueItems/.test(e.message), "bad schema: " + e);
  }
  const lp = await client.chat.completions.create({ model: "m", messages, max_tokens: 8, temperature: 0,
                                                    logprobs: true, top_logprobs: 3 });
  const content = lp.choices[0].logprobs?.content ?? [];
  check(content.length > 0 && content.every((t) => {
    const top = t.top_logprobs;
    return top.length === 3 && top[0].token === t.token && top[0].logprob === t.logprob && t.logprob < 0 &&
      top[0].logprob >= top[1].logprob && top[1].logprob >= top[2].logprob &&
      top.reduce((s, a) => s + Math.exp(a.logprob), 0) <= 1 + 1e-6;
  }), "top_logprobs 3 at temperature 0: " + JSON.stringify(content.slice(0, 2)));
  try {
    await client.chat.completions.create({ model: "m", messages, max_tokens: 2, n: 9 });
    check(false, "n 9 on a server of 4 sequences was accepted");
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === "n" && e.code === "n_too_large" &&
          /--max-n/.test(e.message), "n past the limit: " + e);
  }
  if (failures) process.exit(1);
  console.log("ok: the OpenAI SDK got schema-valid JSON (" + finished + " of 3 finished, and the stream), " +
              content.length + " tokens' top_logprobs and a limit's error");
})().catch((e) => {
  console.log("FAIL: " + (e.stack || e));
  process.exit(1);
});
