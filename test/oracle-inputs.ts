// The inputs the oracle tests (test/oracle-cpu.test.ts, test/default-model.test.ts) feed both
// engines, of three kinds, so that agreement is shown on more than one sequence:
//   - plain text: English prose written for these tests (no model was trained on it);
//   - arbitrary token ids: a fixed pseudo-random walk over the whole vocabulary (walkTokens);
//   - a long context: the prose continued for several hundred to a few thousand tokens, where
//     positions far into the context (RoPE angles, long attention rows) are exercised.
import { walkTokens } from "./distributions.mjs";

/** Prose for the plain-text and long-context inputs: about 1,570 tokens of the default model's vocabulary, 3,800 of the synthetic fixtures'. */
export const PROSE = `The ferry leaves the north pier at a quarter past seven, and on most mornings it carries more bicycles than cars. Nobody on the island remembers when the timetable last changed; the captain, a patient woman who has made the crossing for twenty-six years, says the tides decide and the timetable merely agrees with them. In winter the water turns the colour of slate, and the gulls follow the boat all the way across, hoping that someone will drop a sandwich.

On the far side there is a small market. A man sells honey in jars with hand-written labels, each one naming the field where the bees were kept: clover, heather, lime. Next to him a girl of about twelve mends umbrellas for a coin each, working quickly with a pair of pliers and a reel of wire. She explains, to anyone who asks, that the ribs break where the cloth is stitched, and that a good repair should be stronger than the original.

The library opens at nine. It occupies the ground floor of a former grain store, and the shelves still lean slightly towards the river, as if listening. Visitors are asked to leave wet coats by the door and to return books to the trolley rather than to the shelves, because the librarian has a system and does not trust anyone else with it. Her system is simple enough: history by the windows, science along the back wall, novels wherever there is room.

In the afternoon the wind usually picks up. Fishermen tie their boats twice, once at the bow and once at the stern, and the children fly kites from the sea wall until their parents call them in. When the rain comes, it comes sideways, and the old houses with their thick stone walls seem hardly to notice. Inside, people light stoves, boil water for tea, and argue about whether the new bridge will ever be built.

The bridge has been promised for as long as anyone can remember. Engineers have come and measured the channel, drawn plans, written reports, and gone away again. Some islanders want it badly; they speak of hospitals, of schools, of being able to leave after the last ferry has gone. Others fear that it would change everything, that the quiet would end and the market would fill with strangers. Both sides agree on one thing: if it is built, it should not be ugly.

A teacher at the school has made the bridge into a lesson. Her pupils calculate the weight of steel needed for a span of four hundred metres, estimate the cost of concrete, and write letters to the council explaining their conclusions. One boy worked out that the bridge would pay for itself in forty-one years if every car paid a small toll. Another pointed out that most islanders do not own a car, and that the toll should therefore be charged on bicycles as well, which caused an uproar.

Evenings on the island are long in summer. The sun sets late behind the western hills, and the light lingers on the water for an hour afterwards, pale green and then grey. People walk along the shore, stopping to talk to neighbours, to look at the boats, or simply to watch the birds settle for the night. Somewhere a radio plays an old song, and somebody else, further off, is practising the violin, not very well but with great determination.

There is a lighthouse at the southern point, no longer used. Its lamp was removed years ago and replaced by a small automatic beacon on a metal post, which blinks twice every ten seconds. The tower itself now belongs to a society of volunteers who open it to visitors on Sundays. From the top, on a clear day, one can see three other islands and, very faintly, the mountains of the mainland, blue and white in the distance.

The volunteers keep a logbook in which visitors write their names and a sentence about the view. Most entries are short: beautiful, windy, worth the climb. A few are longer. One visitor wrote that she had come every year since she was a child and that the view was the only thing in her life that had not changed. Another wrote a small poem about the clouds. Someone, in careful capital letters, asked the society to install a lift.

Winter brings storms. The ferry is cancelled perhaps once a week, and then the island is cut off entirely, which most people seem to enjoy. Shops sell out of bread and milk, the school closes early, and neighbours knock on each other's doors to borrow candles. The older residents tell stories of the great storm of 1953, when the sea came over the wall and flooded the square, and boats were found the next morning in the churchyard.

In spring the fields turn yellow with gorse and the lambs appear, unsteady and loud. Farmers work from dawn to dark, mending fences that the winter has knocked down, clearing ditches, and repairing the roofs of barns. The first tourists arrive in April, carrying maps and asking for directions to places that are, almost always, right in front of them. The islanders are polite; tourism pays for the ferry.

A small museum near the harbour tells the history of the island in four rooms. The first room has stone tools and pieces of pottery found when the road was widened. The second has models of the boats that were built here, with their names painted along their sides. The third is about the mine, which closed in 1921, and the fourth is full of photographs of weddings, harvests, football teams and brass bands, each with a list of the people in it, carefully identified by someone who knew them.

The mine is still there, sealed with an iron gate. Children dare each other to touch the gate at night, and every few years someone claims to have heard voices from inside. The truth, according to the museum, is more ordinary: the tunnels fill with water when the tide is high, and the water makes strange noises as it drains away. Nevertheless, few people walk past the gate after dark, and those who do tend to walk quickly.

Every August there is a regatta. Boats of every size race around a course marked with orange buoys, and the whole island gathers on the harbour wall to watch and to shout advice that nobody can hear. There is a prize for the fastest boat, a prize for the oldest boat, and a prize for the boat that finishes last, which is the most sought after. The winner of the last prize is expected to host a dinner for the other crews, and usually does so with pride.`;

/** The tokens of the first `count` of PROSE's tokens under `tokenize` (throws if PROSE has fewer). */
export function proseTokens(tokenize: (text: string) => ArrayLike<number>, count: number): number[] {
  const tokens = Array.from(tokenize(PROSE));
  if (tokens.length < count) throw new Error(`the prose has ${tokens.length} tokens, fewer than ${count}`);
  return tokens.slice(0, count);
}

/** Arbitrary token ids: BOS, then a fixed pseudo-random walk over the whole vocabulary. */
export function idTokens(bos: number, vocabSize: number, count: number): number[] {
  return walkTokens(bos, vocabSize, count);
}
