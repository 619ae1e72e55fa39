// Prints greedy answers of a model to the README's questions, as llama.cpp (node-llama-cpp, CPU) gives them:
// the prompt is the file's own chat template, rendered by node-llama-cpp's Jinja wrapper.
//
//   node tools/train/examples.mjs models/bloomery-tiny-moe-Q8_0.gguf
import { getLlama, JinjaTemplateChatWrapper, LlamaLogLevel } from "node-llama-cpp";

const QUESTIONS = [
  'What does "happy" mean?',
  "What is a dog?",
  "What is a river?",
  "Define computer.",
  'What does "whisper" mean?',
  "What is music?",
  "Tell me a fortune.",
  "Say something wise.",
];

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: process.argv[2] ?? "models/bloomery-tiny-moe-Q8_0.gguf" });
const wrapper = new JinjaTemplateChatWrapper({ template: model.fileInfo.metadata.tokenizer.chat_template });
const context = await model.createContext({ contextSize: 1024, threads: 1 });
for (const question of QUESTIONS) {
  const { contextText } = wrapper.generateContextState({
    chatHistory: [
      { type: "user", text: question },
      { type: "model", response: [] },
    ],
  });
  const sequence = context.getSequence();
  const answer = [];
  for await (const token of sequence.evaluate(contextText.tokenize(model.tokenizer), { temperature: 0 })) {
    if (token === model.tokens.eos || answer.length === 100) break;
    answer.push(token);
  }
  console.log(`> ${question}\n${model.detokenize(answer)}\n`);
  sequence.dispose();
}
await context.dispose();
await model.dispose();
await llama.dispose();
