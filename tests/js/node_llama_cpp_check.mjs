// A run through node-llama-cpp itself, as its users call it: the CPU build it ships (getLlama with gpu false and
// build "never"), a model loaded from a file, the next-token probabilities of every token of a fixed prompt (one
// evaluation of the whole prompt: prefill) hashed as bit patterns, then a greedy completion.
//
//   node node_llama_cpp_check.mjs APP_DIR MODEL THREADS TOKENS
//
// APP_DIR holds node_modules/node-llama-cpp (scripts/prebuilt-ggml.sh node-llama-cpp-app-3.22.1). Prints
// "probabilities: N tokens, M values, sha256 HASH" and "text: JSON"; exits 1 with one line on an error.
import {createHash} from "node:crypto";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const [appDir, model, threads, tokens] = process.argv.slice(2);
if (!tokens) {
  console.error("usage: node node_llama_cpp_check.mjs APP_DIR MODEL THREADS TOKENS");
  process.exit(1);
}
try {
  const entry = join(appDir, "node_modules", "node-llama-cpp", "dist", "index.js");
  const {getLlama, LlamaCompletion} = await import(pathToFileURL(entry).href);
  const llama = await getLlama({gpu: false, build: "never"});
  const loaded = await llama.loadModel({modelPath: model});
  const context = await loaded.createContext({contextSize: 512, threads: Number(threads), sequences: 2});
  const prompt = loaded.tokenize(
    "The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly, " +
    "and a wizard's job is to vex chumps quickly in fog. Pack my box with five dozen liquor jugs.");
  const evaluated = await context.getSequence().controlledEvaluate(
    prompt.map((token) => [token, {generateNext: {probabilities: true}}]));
  const hash = createHash("sha256");
  let values = 0;
  for (const item of evaluated) {
    for (const [token, probability] of item?.next?.probabilities ?? []) {
      const bytes = new DataView(new ArrayBuffer(12));
      bytes.setUint32(0, token, true);
      bytes.setFloat64(4, probability, true);
      hash.update(new Uint8Array(bytes.buffer));
      values++;
    }
  }
  console.log(`probabilities: ${prompt.length} tokens, ${values} values, sha256 ${hash.digest("hex")}`);
  const completion = new LlamaCompletion({contextSequence: context.getSequence()});
  const text = await completion.generateCompletion("The quick brown fox",
    {maxTokens: Number(tokens), temperature: 0});
  console.log(`text: ${JSON.stringify(text)}`);
  await llama.dispose();
} catch (error) {
  console.error(`node_llama_cpp_check: ${error?.message ?? error}`);
  process.exit(1);
}
