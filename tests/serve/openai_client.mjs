// openai_client.mjs: the official `openai` npm client against a running `ocellus serve`
// (tests/test_serve.sh installs the package into a temporary folder and sets NODE_PATH-free
// resolution by running from there). Prints PASS/FAIL lines as tests/run.sh counts.
//   node openai_client.mjs PORT KEY IMAGE
import fs from "node:fs";
import OpenAI from "openai";

const [port, key, image] = process.argv.slice(2);
const client = new OpenAI({ apiKey: key, baseURL: `http://127.0.0.1:${port}/v1`, timeout: 120000, maxRetries: 0 });
const url = "data:image/x-portable-pixmap;base64," + fs.readFileSync(image).toString("base64");
const messages = [{ role: "user", content: [
  { type: "image_url", image_url: { url } },
  { type: "text", text: "What color is the circle in image 1?" } ] }];
let failed = false;
const report = (name, ok, why) => { console.log(ok ? `PASS ${name}` : `FAIL ${name}: ${why}`); if (!ok) failed = true; };

try {
  const r = await client.chat.completions.create({ model: "ocellus-demo", messages, max_tokens: 16 });
  report("openai_js_green", r.choices[0].message.content === "green", JSON.stringify(r).slice(0, 300));
} catch (e) { report("openai_js_green", false, String(e)); }
try {
  const stream = await client.chat.completions.create({ model: "ocellus-demo", messages, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
  report("openai_js_stream_green", text === "green", JSON.stringify(text));
} catch (e) { report("openai_js_stream_green", false, String(e)); }
try {
  const models = await client.models.list();
  report("openai_js_models", models.data.length === 1 && models.data[0].id === "ocellus-demo", JSON.stringify(models.data));
} catch (e) { report("openai_js_models", false, String(e)); }
try {
  await client.chat.completions.create({ model: "ocellus-demo", messages, max_tokens: -1 });
  report("openai_js_error", false, "no error for max_tokens -1");
} catch (e) {
  report("openai_js_error", e.status === 400 && /max_tokens/.test(e.message), `${e.status} ${e.message}`);
}
process.exit(failed ? 1 : 0);
