#!/usr/bin/env python3
"""Composes english.txt, the embedded training corpus of the tokenizer
trainer: plain English prose built from hand-written sentence templates and
word lists (no external text, nothing downloaded). Deterministic: run it to
regenerate the same file. The output is committed; Go never runs this."""
import random

rng = random.Random(20261122)

people = ["the engineer", "a young doctor", "my grandmother", "the old sailor", "our teacher", "the mayor",
          "a tired student", "the baker", "her brother", "the pilot", "a quiet farmer", "the scientist",
          "his neighbour", "the captain", "a stranger", "the children", "the musicians", "the gardener",
          "an old friend", "the nurse", "the librarian", "the shopkeeper", "the writer", "the carpenter"]
names = ["Anna", "Thomas", "Maria", "James", "Elena", "David", "Sarah", "Peter", "Laura", "Michael",
         "Clara", "Henry", "Alice", "Robert", "Emma", "William", "Sophie", "George", "Lucy", "Daniel"]
places = ["the harbour", "the village square", "the old library", "the market", "the railway station",
          "the mountain road", "the kitchen", "the river bank", "the small garden", "the city hall",
          "the hospital", "the forest path", "the school yard", "the lighthouse", "the bakery",
          "the museum", "the bridge", "the empty beach", "the factory", "the top floor"]
times = ["in the morning", "after dinner", "late at night", "on Sunday", "before the storm",
         "at noon", "during the winter", "last summer", "every evening", "in early spring",
         "the next day", "years ago", "at dawn", "on a rainy afternoon", "before breakfast"]
verbs_past = ["walked to", "looked at", "returned to", "painted", "cleaned", "visited", "left",
              "remembered", "described", "photographed", "repaired", "searched", "guarded", "admired"]
objects = ["a letter", "the broken clock", "an old map", "a basket of apples", "the heavy box",
           "a blue umbrella", "the wooden chair", "a loaf of bread", "the red bicycle", "a small key",
           "the newspaper", "a cup of tea", "the garden gate", "a pair of boots", "the lantern",
           "a bundle of wood", "the silver ring", "a jar of honey", "the kitchen table", "a warm coat"]
adjs = ["quiet", "bright", "cold", "narrow", "ancient", "busy", "gentle", "strange", "heavy", "simple",
        "careful", "honest", "patient", "curious", "familiar", "distant", "crowded", "peaceful", "sudden", "useful"]
adverbs = ["slowly", "quickly", "carefully", "quietly", "suddenly", "patiently", "happily", "nervously",
           "gently", "proudly", "finally", "rarely", "often", "almost", "clearly"]
nouns = ["weather", "journey", "river", "question", "answer", "story", "music", "garden", "window",
         "mountain", "problem", "idea", "memory", "machine", "market", "season", "letter", "voice",
         "lesson", "kitchen", "harvest", "road", "village", "secret", "promise", "history", "science",
         "language", "number", "picture", "evening", "family", "country", "morning", "winter"]
feelings = ["happy", "worried", "surprised", "tired", "proud", "afraid", "grateful", "calm", "curious", "sad"]
topics = ["the price of bread", "the new bridge", "the election", "the weather", "the harvest",
          "the train timetable", "the football match", "the school play", "the broken engine",
          "the history of the town", "the storm last week", "the price of coal", "a book about birds"]


# A broad vocabulary so that a few thousand merges have distinct words to
# learn from: base forms by part of speech, inflected regularly below.
NOUNS = """account acid age air amount animal answer apple arch arm army art attack attempt attention
authority autumn baby back bag balance ball band base basin basket bath bed bee bell berry bird birth
blade blood board boat body bone book boot bottle box boy brain brake branch brass bread breath brick
bridge brother brush bucket building bulb burn butter button cake camera card carriage cart cat cattle
cause chain chalk chance change cheese chest chin church circle clock cloth cloud coal coat collar colour
comb comfort committee company comparison competition condition connection control cook copper copy cord
cork cotton cough country cover cow crack credit crime crush cry cup current curtain curve cushion damage
danger daughter day death debt decision degree design desire detail development digestion direction
discovery discussion disease distance distribution division dog door doubt drain drawer dress drink
driving drop dust ear earth edge education effect egg engine error event example exchange existence
expansion experience expert eye face fact fall family farm father fear feather feeling fiction field
fight finger fire fish flag flame flight floor flower fly fold food foot force fork form fowl frame friend
front fruit garden girl glass glove goat gold government grain grass grip group growth guide gun hair
hammer hand harbour harmony hat hate head hearing heart heat help history hole hook hope horn horse
hospital hour house humour ice idea impulse increase industry ink insect instrument insurance interest
invention iron island jelly jewel journey judge jump kettle key kick kiss knee knife knot knowledge land
language laugh law lead leaf learning leather leg letter level library lift light limit line linen lip
liquid list lock look loss love machine man manager map mark market mass meal measure meat meeting memory
metal middle milk mind mine minute mist money monkey month moon morning mother motion mountain mouth move
muscle music nail name nation neck need needle nerve net news night noise nose note number nut observation
offer office oil operation opinion orange order organisation ornament oven owner page pain paint paper
parcel part paste payment peace pen pencil person picture pig pin pipe place plane plant plate play
pleasure plough pocket point poison polish porter position pot potato powder power price print prison
process produce profit property prose protest pull pump punishment purpose push quality question rail
rain range rat rate ray reaction reading reason receipt record regret relation religion representative
request respect rest reward rhythm rice ring river road rod roll roof room root rule run sail salt sand
scale school science scissors screw sea seat secretary seed selection self sense servant sex shade shake
shame sheep shelf ship shirt shock shoe side sign silk silver sister size skin skirt sky sleep slip slope
smash smell smile smoke snake sneeze snow soap society sock son song sort sound soup space spade sponge
spoon spring square stage stamp star start statement station steam steel stem step stick stitch stocking
stomach stone stop store story street stretch structure substance sugar suggestion summer sun support
surprise swim system table tail talk taste tax teaching tendency test theory thing thought thread throat
thumb thunder ticket time tin toe tongue tooth top touch town trade train transport tray tree trick
trouble trousers turn twist umbrella unit use value verse vessel view voice walk wall war wash waste
watch water wave wax way weather week weight wheel whip whistle wind window wine wing winter wire woman
wood wool word work worm wound writer writing year""".split()
VERBS = """accept add admire admit advise afford agree alert allow amuse announce annoy answer apologise
appear applaud arrange arrest arrive ask attach attack attempt attend attract avoid back bake balance
ban bang bathe battle beam beg behave belong bless blind blink boast boil bolt book bore borrow bounce
bow box brake branch breathe bruise brush bump burn bury buzz calculate call camp care carry carve cause
challenge change charge chase cheat check cheer chew choke chop claim clap clean clear clip close coach
collect colour comb command communicate compare compete complain complete concentrate concern confess
confuse connect consider consist contain continue copy correct cough count cover crack crash crawl cross
crush cry cure curl cycle damage dance dare decay deceive decide decorate delay delight deliver depend
describe desert deserve destroy detect develop disagree disappear discover dislike divide double doubt
drag drain dream dress drip drop drown dry dust earn educate embarrass employ empty encourage end enjoy
enter entertain escape examine excite excuse exercise exist expand expect explain explode extend face
fade fail fancy fasten fear fence fetch file fill film fire fit fix flap flash float flood flow flower
fold follow fool force form found frame frighten fry gather gaze glow glue grab grate grease greet grin
grip groan guarantee guard guess guide hammer hand handle hang happen harm hate haunt head heal heap
heat help hook hop hope hover hug hum hunt hurry identify ignore imagine impress improve include increase
influence inform inject injure instruct intend interest interfere interrupt introduce invent invite
irritate itch jail jam jog join joke judge juggle jump kick kill kiss kneel knit knock knot label land
last laugh launch learn level license lick lie lighten like list listen live load lock long look love
manage march mark marry match mate matter measure melt memorise mend milk mine miss mix moan moor mourn
move muddle mug multiply murder nail name need nest nod note notice number obey object observe obtain
occur offend offer open order overflow owe own pack paddle paint park part pass paste pat pause peck
pedal peel peep perform permit phone pick pinch pine place plan plant play please plug point poke polish
pop possess post pour practise pray preach precede prefer prepare present preserve press pretend prevent
prick print produce program promise protect provide pull pump punch puncture punish push question queue
race radiate rain raise reach realise receive recognise record reduce reflect refuse regret reign reject
rejoice relax release rely remain remember remind remove repair repeat replace reply report reproduce
request rescue retire return rhyme rinse risk rob rock roll rot rub ruin rule rush sack sail satisfy save
saw scare scatter scold scorch scrape scratch scream screw scribble scrub seal search separate serve
settle shade share shave shelter shiver shock shop shrug sigh sign signal sin sip ski skip slap slip slow
smash smell smile smoke snatch sneeze sniff snore snow soak soothe sound spare spark sparkle spell spill
spoil spot spray sprout squash squeak squeal squeeze stain stamp stare start stay steer step stir stitch
stop store strap strengthen stretch strip stroke stuff subtract succeed suck suffer suggest suit supply
support suppose surprise surround suspect suspend switch talk tame tap taste tease telephone tempt terrify
test thank thaw tick tickle tie time tip tire touch tour tow trace trade train transport trap travel
treat tremble trick trip trot trouble trust try tug tumble turn twist type undress unfasten unite unlock
unpack untidy use vanish visit wail wait walk wander want warm warn wash waste watch water wave weigh
welcome whine whip whirl whisper whistle wink wipe wish wobble wonder work worry wrap wreck wrestle
wriggle yawn yell zip zoom""".split()
ADJS = """able acid angry automatic awake bad beautiful bent bitter black blue boiling bright broken brown
certain cheap chemical chief clean clear cold common complete complex conscious cruel cut dark dead dear
deep delicate dependent different dirty dry early elastic electric equal false fat feeble female fertile
first fixed flat foolish free frequent full future general good great green grey hanging happy hard
healthy high hollow ill important kind last late left like living long loose loud low male married
material medical military mixed narrow natural necessary new normal old open opposite parallel past
physical political poor possible present private probable public quick quiet ready red regular
responsible right rough round sad safe same second secret separate serious sharp short shut simple slow
small smooth soft solid special sticky stiff straight strange strong sudden sweet tall thick thin tight
tired true violent waiting warm wet white wide wise wrong yellow young""".split()

NOUNS += """anchor ankle apron arrow attic avenue badge bandage banner barn barrel beach beard beetle bench
blanket blossom bonnet border bowl bracelet breeze brook bubble buckle buffalo bundle cabin cabinet
canal candle canoe canvas canyon carpet castle cave cellar chapel chimney cliff closet clover compass
cottage courtyard crate creek crown cupboard dagger desk diamond ditch dolphin donkey dragon drum eagle
elbow envelope fabric falcon fountain fox frost galaxy gallery glacier goose gravel guitar gazebo hall
hammock harp hawk hedge helmet hill hive hut jacket jungle kitchen ladder lagoon lake lamp lantern lemon
lighthouse lion lizard lobster marble meadow mirror moss moth mule museum napkin necklace ocean orchard
owl oyster palace parrot pasture pearl pebble pepper piano pillow planet pond poppy puddle puppet quilt
rabbit raft ribbon ridge robin rocket saddle satchel scarf shadow shell shore shovel sled sleeve spider
squirrel stable stairway statue stove stream swamp sword temple tent thistle tiger tower tractor trail
treasure tunnel turtle valley velvet village violin volcano wagon walnut whale willow wolf wreath""".split()
ADJS += """amber ancient anxious bold brave brief brilliant calm clever cosy crisp curious dizzy dusty
eager elegant empty enormous faint famous fancy fierce fragile fresh friendly gentle giant glad golden
graceful grand hasty heavy honest humble hungry icy jolly lazy little lonely lucky magic mellow merry
mighty misty modest muddy noble odd pale patient plain pleasant polite proud purple rare rapid rich rusty
salty scarlet shallow shiny shy silent silly sleepy slender sly smoky snowy solemn sour spicy steady
stormy sturdy sunny swift tame tender tidy tiny toasty tricky ugly vast velvet vivid wicked wild windy
witty wooden worried""".split()

def plural(n):
    if n.endswith(("s", "x", "ch", "sh")):
        return n + "es"
    if n.endswith("y") and n[-2] not in "aeiou":
        return n[:-1] + "ies"
    return n + "s"

def past(v):
    if v.endswith("e"):
        return v + "d"
    if v.endswith("y") and v[-2] not in "aeiou":
        return v[:-1] + "ied"
    return v + "ed"

def ing(v):
    if v.endswith("e") and not v.endswith("ee"):
        return v[:-1] + "ing"
    return v + "ing"

def adverb(a):
    if a.endswith("y"):
        return a[:-1] + "ily"
    if a.endswith("le"):
        return a[:-1] + "y"
    return a + "ly"


def derived(kind, w):
    """Regular English derivations, for lexical variety."""
    if kind == "ness":
        return (w[:-1] + "i" if w.endswith("y") else w) + "ness"
    if kind == "er":
        return (w[:-1] if w.endswith("e") else w) + "er"
    if kind == "less":
        return (w[:-1] + "i" if w.endswith("y") else w) + "less"
    if kind == "ful":
        return (w[:-1] + "i" if w.endswith("y") else w) + "ful"
    if kind == "re":
        return "re" + w
    if kind == "un":
        return "un" + w
    if kind == "able":
        return (w[:-1] if w.endswith("e") else w) + "able"
    return w

def derived_sentence():
    k = rng.randrange(8)
    n1, n2 = rng.choice(NOUNS), rng.choice(NOUNS)
    v1, v2 = rng.choice(VERBS), rng.choice(VERBS)
    a1, a2 = rng.choice(ADJS), rng.choice(ADJS)
    s = subj()
    if k == 0:
        return f"The {derived('ness', a1)} of the {n1} surprised {s}."
    if k == 1:
        return f"{cap(s)} was a careful {derived('er', v1)} of {plural(n1)} and a {a1} {derived('er', v2)}."
    if k == 2:
        return f"It seemed {derived('less', n1)} to {derived('re', v1)} the {n2} so {adverb(a1)}."
    if k == 3:
        return f"A {derived('ful', n1)} of {plural(n2)} stood by the {derived('un', a1)} door."
    if k == 4:
        return f"Is the {n1} {derived('able', v1)}? {cap(s)} thinks it is {derived('un', a2)}."
    if k == 5:
        return f"{cap(derived('ness', a1))} and {derived('ness', a2)} were the words {s} used for the {n1}."
    if k == 6:
        return f"They {derived('re', past(v1))} the {plural(n1)} after the {plural(n2)} were {past(v2)}."
    return f"The {derived('er', v1)}s {adverb(a1)} {past(v2)} the {derived('less', n1)} {n2}."

def rich_sentence():
    k = rng.randrange(10)
    n1, n2, n3 = rng.choice(NOUNS), rng.choice(NOUNS), rng.choice(NOUNS)
    v1, v2 = rng.choice(VERBS), rng.choice(VERBS)
    a1, a2 = rng.choice(ADJS), rng.choice(ADJS)
    s = subj()
    if k == 0:
        return f"{cap(s)} {past(v1)} the {a1} {n1} and then {past(v2)} the {plural(n2)}."
    if k == 1:
        return f"While {ing(v1)} the {n1}, {s} {adverb(a1)} {past(v2)} a {a2} {n2}."
    if k == 2:
        return f"The {plural(n1)} of the {n2} are {a1}, but the {n3} is {a2}."
    if k == 3:
        return f"Do not {v1} the {n1} before you {v2} the {plural(n2)}."
    if k == 4:
        return f"{cap(plural(n1))} and {plural(n2)} were {ing(v1)} {adverb(a1)} in the {a2} {n3}."
    if k == 5:
        return f"Is the {n1} {a1} enough to {v1} a {n2}, or should we {v2} it {adverb(a2)}?"
    if k == 6:
        return f"A {a1} {n1} {past(v1)} {s}; it was {a2}, and everyone {past(v2)}."
    if k == 7:
        return f"{cap(s)} likes {ing(v1)} {plural(n1)}, {ing(v2)} {plural(n2)} and reading about the {n3}."
    if k == 8:
        return f"After the {n1} {past(v1)}, the {a1} {plural(n2)} {adverb(a2)} {past(v2)} the {n3}."
    return f"Nobody {past(v1)} why the {n1} felt so {a1} that {rng.choice(times)}."

def cap(s):
    return s[0].upper() + s[1:]

def subj():
    return rng.choice(people + names)

def sentence():
    r = rng.random()
    if r < 0.3:
        return derived_sentence()
    if r < 0.7:
        return rich_sentence()
    k = rng.randrange(18)
    s, p, t, o = subj(), rng.choice(places), rng.choice(times), rng.choice(objects)
    if k == 0:
        return f"{cap(t)}, {s} {rng.choice(verbs_past)} {p}."
    if k == 1:
        return f"{cap(s)} {rng.choice(adverbs)} {rng.choice(verbs_past)} {o} near {p}."
    if k == 2:
        return f"\"I don't know,\" said {rng.choice(names)}, \"but it's {rng.choice(adjs)}, and I'm {rng.choice(feelings)}.\""
    if k == 3:
        return f"The {rng.choice(adjs)} {rng.choice(nouns)} was {rng.choice(adjs)}, yet nobody thought it {rng.choice(adjs)}."
    if k == 4:
        return f"Why would {s} leave {o} at {p} {t}?"
    if k == 5:
        return f"{cap(s)} wasn't {rng.choice(feelings)}; she'd seen {rng.randint(2, 99)} such {rng.choice(nouns)}s before."
    if k == 6:
        return f"There were {rng.randint(3, 1999)} people at {p}, and {rng.randint(2, 60)} of them talked about {rng.choice(topics)}."
    if k == 7:
        return f"{cap(s)} bought {o} for {rng.randint(1, 40)}.{rng.randint(10, 99)} dollars on {rng.randint(1, 28)} March {rng.randint(1890, 2024)}."
    if k == 8:
        return f"If the {rng.choice(nouns)} is {rng.choice(adjs)}, then the {rng.choice(nouns)} must be {rng.choice(adjs)} too."
    if k == 9:
        return f"We'll meet at {p} {t}, they've said, unless the {rng.choice(nouns)} changes."
    if k == 10:
        return f"{cap(rng.choice(adverbs))}, {s} opened {o} and found {rng.choice(objects)} inside."
    if k == 11:
        return f"It's been {rng.randint(2, 40)} years since {s} wrote about {rng.choice(topics)}."
    if k == 12:
        return f"\"Is it true?\" asked {rng.choice(names)}. \"Yes,\" answered {s}, \"it is.\""
    if k == 13:
        return f"Some say the {rng.choice(nouns)} of {p} is {rng.choice(adjs)}; others say it is merely {rng.choice(adjs)}."
    if k == 14:
        return f"{cap(s)} counted {rng.randint(10, 500)} steps from {p} to {rng.choice(places)}, then {rng.randint(10, 500)} more."
    if k == 15:
        return f"Nobody could explain why {s} kept {o} in {p} for so long."
    if k == 16:
        return f"The report (page {rng.randint(1, 300)}) says that {rng.randint(5, 95)}% of the {rng.choice(nouns)}s were {rng.choice(adjs)}."
    return f"{cap(s)} and {rng.choice(people + names)} talked about {rng.choice(topics)} until {rng.randint(1, 12)} o'clock."

handwritten = """The first snow came early that year. It covered the roofs of the village and the fields beyond the river, and for a few days nobody went anywhere they did not have to go. The baker still opened his shop at six, because people still needed bread, and the children still walked to school, because the teacher would not hear of closing it.

A good tool does one thing and does it well. It tells you what it measured, how it measured it, and how sure it is. When it cannot know something, it says so plainly instead of guessing.

Science is a way of asking questions so that nature can answer them. You write down what you expect, you try it, and you look carefully at what actually happens. Most of the time the answer is not the one you hoped for, and that is where the interesting work begins.

"Where are you going?" asked the old man at the gate.
"To the city," said the girl. "My aunt lives there, near the river, in a house with a green door."
"Then you had better hurry. The last train leaves at half past four, and it never waits for anyone."

On Monday the committee met to discuss the budget. The treasurer reported that income had risen by 4.5 percent, while costs had risen by almost 7 percent. After a long discussion, they agreed to postpone the new roof until spring and to ask the town for a small grant.

Rivers do not run straight. They bend around hard rock and cut through soft earth, and over thousands of years they move across their valleys like a slow pendulum. An old map of the valley shows the river a mile west of where it runs today.

"""

paras = []
size = 0
target = 460_000
while size < target:
    if rng.random() < 0.06:
        p = handwritten.split("\n\n")[rng.randrange(6)].strip()
    else:
        p = " ".join(sentence() for _ in range(rng.randint(3, 8)))
    paras.append(p)
    size += len(p) + 2
with open("english.txt", "w") as f:
    f.write("\n\n".join(paras) + "\n")
