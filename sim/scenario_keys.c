/* sim/scenario_keys.c -- the scenario's own sections as key tables (scenario_keys.h): their
 * types, defaults, ranges and docs, which sim/scenario.c reads them through, and `fedsim keys`
 * (sim_scenario_keys_print) with the algorithms' (fl_keys_print) and a device profile's
 * (dev_profile_keys). scenarios/README.md's key tables are that command's Markdown.
 */
#include "sim/scenario_keys.h"

#include "algos/algo.h"
#include "devices/profile.h"
#include "sim/scenario.h"
#include "sim/select.h"

#include <limits.h>
#include <string.h>

const char *const sim_dataset_names[] = {"fashion-mnist",
                                         "synth-pews-32k",
                                         "synth-pews-3.2k",
                                         "leaf-synthetic",
                                         "idx",
                                         "cifar10",
                                         NULL};
static const char *const SCHEMES[] = {"iid",  "dirichlet", "shards",  "natural",
                                      "file", "sizes",     "classes", NULL};
static const char *const MODES[] = {"sync", "async", NULL};
static const char *const STALE[] = {"constant", "polynomial", "hinge", NULL};

#define K(field) .offset = offsetof(sim_top_keys, field)
const sim_key sim_keys_top[] = {
        {"name", SIM_KEY_STRING, .custom = 1, /* its default is the file's: in the doc */
         .doc = "run name (run folder `runs/NAME-SEED`, the first line of metrics.tsv): 1 to 127 "
                "letters, digits and `- _ . + = ,`, not starting with `.` (no `/`, spaces or "
                "control characters); by default the file's name without extension, its "
                "characters outside that set as `_`"},
        {"seed", SIM_KEY_LONG, K(seed), .dflt = "1", .lo = 0, .hi = (double)LONG_MAX,
         .doc = "the one seed of the run; every random stream derives from it"},
        {"rounds", SIM_KEY_INT, K(rounds), .dflt = "100", .lo = 1, .hi = 100000000,
         .doc = "sync: rounds; async: aggregations"},
        {"max_time", SIM_KEY_TIME, K(max_time), .dflt = "none",
         .doc = "stop at this simulated time"},
        {"cost_only", SIM_KEY_BOOL, K(cost_only), .dflt = "false",
         .doc = "skip the training math: jobs report the FLOPs and message sizes they would have "
                "(huge populations, device-mix studies); also `fedsim run --cost-only`"},
        /* read once the dataset and partition are */
        {"model", SIM_KEY_STRING, K(model), .size = sizeof(((sim_top_keys *)0)->model), .custom = 1,
         .dflt = "cnn2",
         .doc = "`mlp:784-200-200-10` (any widths), `mlpbn:...`, `cnn2`, `lenet5-caffe`, "
                "`lenet-mnn`, `pa3dfl-cnn`, `leaf-cnn`, `fedpews-mlp`, `fedpews-cnn`; `NAME@p` "
                "(e.g. "
                "`pa3dfl-cnn@0.0625`): the same with ⌈p·C⌉ outputs in every hidden layer, a "
                "model of its own initialized for its own fan-in (FedAvg at the weakest client's "
                "width)"},
        {0},
};
#undef K

/* Each kind of dataset reads its own keys (scenario.c), by name and in this order. */
#define K(field)    .offset = offsetof(sim_dataset_keys, field)
#define PATH(field) K(field), .size = sizeof(((sim_dataset_keys *)0)->field)
const sim_key sim_keys_dataset[] = {
        {"name", SIM_KEY_CHOICE, K(name), .dflt = "fashion-mnist", .words = sim_dataset_names,
         .doc = "`fashion-mnist`, `synth-pews-32k`, `synth-pews-3.2k` (FedPeWS 2-D clusters), "
                "`leaf-synthetic` (LEAF Synthetic(α,β), natural clients), `idx` (any "
                "MNIST-format pair), `cifar10` (binary batches)"},
        {"dir", SIM_KEY_STRING, PATH(dir), .custom = 1, .dflt = "/usr/share/datasets/fashion-mnist",
         .doc = "fashion-mnist: folder of the gzip'd IDX files; cifar10: folder of "
                "`data_batch_N.bin`, `test_batch.bin` (required)"},
        {"train_images", SIM_KEY_STRING, PATH(idx[0]), .custom = 1,
         .doc = "idx: the training images (an IDX file, gzip'd or plain); required"},
        {"train_labels", SIM_KEY_STRING, PATH(idx[1]), .custom = 1,
         .doc = "idx: the training labels; required"},
        {"test_images", SIM_KEY_STRING, PATH(idx[2]), .custom = 1,
         .doc = "idx: the test images; required"},
        {"test_labels", SIM_KEY_STRING, PATH(idx[3]), .custom = 1,
         .doc = "idx: the test labels; required"},
        {"clients", SIM_KEY_INT, K(clients), .custom = 1, .dflt = "30", .lo = 1, .hi = 100000,
         .doc = "leaf-synthetic: its natural clients"},
        {"alpha", SIM_KEY_DOUBLE, K(alpha), .custom = 1, .dflt = "1", .lo = 0, .hi = 100,
         .doc = "leaf-synthetic: α, how far the clients' models differ"},
        {"beta", SIM_KEY_DOUBLE, K(beta), .custom = 1, .dflt = "1", .lo = 0, .hi = 100,
         .doc = "leaf-synthetic: β, how far the clients' inputs differ"},
        {"test_fraction", SIM_KEY_DOUBLE, K(test_fraction), .custom = 1, .dflt = "0.2", .lo = 0,
         .hi = 0.9, .doc = "leaf-synthetic: share of each client's samples held out as test set"},
        {"scale", SIM_KEY_DOUBLE, K(scale), .dflt = "1", .lo = 1e-9, .hi = 1e9,
         .doc = "multiply every input by this (`255`: the raw 0–255 pixels SpaFL's code trains "
                "on)"},
        {0},
};
#undef PATH
#undef K

/* partition.scheme's default: natural for a dataset with natural clients */
static void scheme_default(const sim_key_ctx *ctx, char *buf, size_t n)
{
    const sim_partition_keys *p = ctx->config;
    snprintf(buf, n, "%s", SCHEMES[p->natural ? 3 : 0]);
}

/* Each scheme reads its own keys (scenario.c), by name and in this order. */
#define K(field) .offset = offsetof(sim_partition_keys, field)
const sim_key sim_keys_partition[] = {
        {"scheme", SIM_KEY_CHOICE, K(scheme), .dflt = "iid (natural for leaf-synthetic)",
         .dflt_fn = scheme_default, .words = SCHEMES,
         .doc = "`iid`, `dirichlet` (label skew), `shards` (k label-sorted shards each), "
                "`classes` (client k gets the classes of `groups[k]`), `natural` (the dataset's "
                "own clients), `file` (one line per client of training indices), `sizes` "
                "(clients with a sample count and no data: cost-only runs of huge populations)"},
        {"groups", SIM_KEY_LIST, .custom = 1,
         .doc = "classes: one list of classes per client, e.g. `[[0, 1], [2, 3]]`; a class "
                "listed by several clients is cut between them; required"},
        {"clients", SIM_KEY_INT, K(clients), .custom = 1, .dflt = "100", .lo = 1, .hi = 10000000,
         .doc = "number of clients (iid, dirichlet, shards; sizes: up to 100000000)"},
        {"alpha", SIM_KEY_DOUBLE, K(alpha), .custom = 1, .dflt = "0.5", .lo = 1e-6, .hi = 1e6,
         .doc = "dirichlet: the concentration"},
        {"min_size", SIM_KEY_INT, K(min_size), .custom = 1, .dflt = "10", .lo = 0, .hi = 1000000,
         .doc = "dirichlet: resample until every client has this many samples"},
        {"shards", SIM_KEY_INT, K(shards), .custom = 1, .dflt = "2", .lo = 1, .hi = 1000,
         .doc = "shards: shards per client"},
        {"samples", SIM_KEY_INT, K(samples), .custom = 1, .dflt = "600", .lo = 1, .hi = 100000000,
         .doc = "sizes: samples per client"},
        {"sigma", SIM_KEY_DOUBLE, K(sigma), .custom = 1, .dflt = "0", .lo = 0, .hi = 10,
         .doc = "sizes: the samples per client lognormal around `samples` with this log-space "
                "sigma, when > 0"},
        {"file", SIM_KEY_STRING, K(file), .size = sizeof(((sim_partition_keys *)0)->file),
         .custom = 1,
         .doc = "file: the partition file (a line of training indices per client, `#` comments "
                "allowed; relative to the scenario's folder); required"},
        {"local_test", SIM_KEY_DOUBLE, K(local_test), .custom = 1, .dflt = "0.2", .lo = 0,
         .hi = 0.9,
         .doc = "size of each client's local test split, as a fraction of its training samples, "
                "drawn with its own label distribution (personalized accuracy); `0` = none "
                "(sizes: always 0)"},
        {"local_test_from_train", SIM_KEY_BOOL, K(local_test_from_train), .custom = 1,
         .dflt = "false",
         .doc = "hold the local test split out of the client's own samples instead of drawing it "
                "from the test set"},
        {"local_val", SIM_KEY_DOUBLE, K(local_val), .custom = 1, .dflt = "0", .lo = 0, .hi = 0.9,
         .doc = "share of each client's local test split set apart as its validation split, per "
                "class, the rest being what it is tested on: `acc_val_mean` in metrics.tsv and "
                "`at_val` in `fedsim summary` (the test accuracy at the evaluation with the best "
                "validation accuracy, the round a paper following FLGo reports), and what Pa3dFL "
                "chooses its interpolation on; `0` = none (sizes: always 0)"},
        {0},
};
#undef K

/* per_round's and concurrency's default: 10 clients, or all when there are fewer */
static void ten_default(const sim_key_ctx *ctx, char *buf, size_t n)
{
    snprintf(buf, n, "%d", ctx->clients < 10 ? ctx->clients : 10);
}

/* The keys of the mode chosen are read (scenario.c), by name and in this order. */
#define K(field) .offset = offsetof(sim_fed_config, field)
const sim_key sim_keys_federation[] = {
        {"mode", SIM_KEY_CHOICE, K(mode), .dflt = "sync", .words = MODES,
         .doc = "`sync` rounds or `async` (FedBuff)"},
        {"per_round", SIM_KEY_INT, K(per_round), .custom = 1, .dflt = "min(10, clients)",
         .dflt_fn = ten_default, .lo = 1, .hi = 100000000,
         .doc = "sync: updates a round aggregates"},
        {"fraction", SIM_KEY_DOUBLE, .custom = 1, .lo = 1e-9, .hi = 1,
         .doc = "sync: per_round as a fraction of the clients, rounded up (give one of the two)"},
        {"over_commit", SIM_KEY_DOUBLE, K(over_commit), .custom = 1, .dflt = "1", .lo = 1,
         .hi = 100,
         .doc = "sync: start ceil(per_round × this) jobs, aggregate the first per_round arrivals "
                "(FedScale)"},
        {"deadline", SIM_KEY_TIME, K(deadline), .custom = 1, .dflt = "none",
         .doc = "sync: close the round this long after it starts; later uploads are dropped and "
                "counted"},
        {"concurrency", SIM_KEY_INT, K(concurrency), .custom = 1, .dflt = "min(10, clients)",
         .dflt_fn = ten_default, .lo = 1, .hi = 100000000, .doc = "async: jobs kept in flight"},
        {"buffer", SIM_KEY_INT, K(buffer), .custom = 1, .dflt = "5", .lo = 1, .hi = 100000000,
         .doc = "async: updates per aggregation"},
        {"staleness", SIM_KEY_MAP, .custom = 1, .dflt = "{kind: polynomial, a: 0.5, b: 4}",
         .doc = "async: the weight of an update τ versions old (`federation.staleness` below)"},
        {"overhead", SIM_KEY_SIZE, K(overhead_bytes), .custom = 1, .dflt = "0 B",
         .doc = "protocol bytes added to every message"},
        {"selection", SIM_KEY_MAP, .custom = 1,
         .doc = "which clients get a job: `{name: POLICY, POLICY: {its keys}}` "
                "(`federation.selection` below); absent: `uniform`, and nothing is written"},
        {"participation", SIM_KEY_STRING, .custom = 1, .dflt = "any",
         .doc = "`any`, or `charging-only`: a client takes a job only while its device charges "
                "(production FL's rule; its battery's `charging`, devices on mains always do), "
                "whatever the selection policy; needs `devices.energy`. Absent: nothing is "
                "written"},
        {0},
};

const sim_key sim_keys_staleness[] = {
        {"kind", SIM_KEY_CHOICE, K(staleness), .dflt = "polynomial", .words = STALE,
         .doc = "`constant` 1, `polynomial` (1+τ)^-a, `hinge` 1 if τ ≤ b else 1/(a(τ−b)+1)"},
        {"a", SIM_KEY_DOUBLE, K(stale_a), .dflt = "0.5", .lo = 0, .hi = 100,
         .doc = "polynomial's exponent, hinge's slope"},
        {"b", SIM_KEY_DOUBLE, K(stale_b), .dflt = "4", .lo = 0, .hi = 1e6,
         .doc = "hinge: the versions an update may lag at full weight"},
        {0},
};
#undef K

#define K(field) .offset = offsetof(sim_eval_config, field)
const sim_key sim_keys_eval[] = {
        {"every", SIM_KEY_INT, K(every_rounds), .dflt = "1", .lo = 0, .hi = 100000000,
         .doc = "evaluate after every N rounds/aggregations (0 = only at the end)"},
        {"every_time", SIM_KEY_TIME, K(every_time), .dflt = "none",
         .doc = "also every this much simulated time (checked when a round or aggregation ends, "
                "so at most once per round)"},
        {"personalized", SIM_KEY_BOOL, K(personalized), .dflt = "true",
         .doc = "also each client's model on its local test split (mean and bottom decile)"},
        {"test_subset", SIM_KEY_INT, K(test_subset), .dflt = "0", .lo = 0, .hi = 100000000,
         .doc = "evaluate the global model on the first N test samples (0 = all)"},
        {"clients", SIM_KEY_INT, K(clients), .dflt = "0", .lo = 0, .hi = 100000000,
         .doc = "evaluate personalized models on a fixed random sample of N of the clients with "
                "a local test split (0 or at least their number = all): drawn once from the "
                "seed (stream (seed, eval sample, 0)), the same at every evaluation and across a "
                "resume; the `acc_pers_*`, shift, base and val columns are over the sample, "
                "`clients.tsv`'s `acc_final` is `nan` outside it, and `metrics.tsv`'s first line "
                "says `eval_clients=N/M`"},
        {"shift", SIM_KEY_LIST, .custom = 1,
         .doc = "a list of shares p in [0, 1] (at most 16): for each, every client's local test "
                "split with round(p·n) of its samples replaced by samples drawn from the pool of "
                "all clients' splits (test-time shift, DM-PFL's protocol; stream (seed, shift, "
                "client), nested in p), and a `metrics.tsv` column `acc_shift_<p>` with the mean "
                "personalized accuracy on them; needs `personalized: true`"},
        {0},
};
#undef K

static void catalog_default(const sim_key_ctx *ctx, char *buf, size_t n)
{
    (void)ctx;
    snprintf(buf, n, "%s", sim_default_catalog());
}

/* Read by name, in this order: the catalog first (the profiles may name its own) */
#define K(field) .offset = offsetof(sim_devices_keys, field)
const sim_key sim_keys_devices[] = {
        {"catalog", SIM_KEY_STRING, K(catalog), .size = sizeof(((sim_devices_keys *)0)->catalog),
         .dflt = "devices/catalog.yaml", .dflt_fn = catalog_default,
         .doc = "the named profiles (`fedsim devices` lists them); the default is fedsim's own"},
        {"profiles", SIM_KEY_MAP, .custom = 1,
         .doc = "your own profiles by name (a name as for `name` above, up to 47 characters: it "
                "is clients.tsv's device column): a full profile, or `base: CATALOG_NAME` plus the "
                "fields to override (`devices.profiles.NAME` below)"},
        {"mix", SIM_KEY_LIST, .custom = 1, .dflt = "[{profile: laptop, share: 1}]",
         .doc = "which profile each client gets: shares must sum to 1; counts by largest "
                "remainder, assigned in a seeded random order"},
        {"population", SIM_KEY_MAP, .custom = 1, .dflt = "none",
         .doc = "phones drawn from public measurements for some or all clients "
                "(`devices.population` below); the other clients take the mix"},
        {"energy", SIM_KEY_BOOL, .custom = 1, .dflt = "false",
         .doc = "charge the profiles' `power` figures and run their `battery` (devices/energy.h): "
                "clients.tsv gains `energy_j`, `battery_lost` and `battery_end`, metrics.tsv "
                "`client_energy_j`; off, the figures (the catalog's "
                "phones have them) are left unused and a `devices.profiles` entry giving them is "
                "refused; not yet with `network`"},
        {"capacity", SIM_KEY_STRING, K(capacity), .size = sizeof(((sim_devices_keys *)0)->capacity),
         .dflt = "device",
         .doc = "each client's share r_i ∈ (0, 1] of the full model's cost, for algorithms that "
                "size models by it (`algorithm.width.by: capacity`, `pa3dfl`): `device` (its "
                "profile's `capacity`, or `auto`: min(1, memory / the full model's training "
                "memory, compute / the fastest compute in the mix; FLOP/s only, not "
                "`mem_bandwidth` or `step_overhead`)), `uniform` (r_i = (π(i)+1)/N for a seeded "
                "permutation π: the Pa3dFL paper's \"Hetero\"), or a number for every client "
                "(`1`: its \"Ideal\"). `fedsim check` and `run` warn when clients train a wider "
                "model than an explicit capacity (`uniform`, a number, a profile's `capacity`) "
                "affords them, width² > r_i (a `NAME@p` model counts as p wide): an algorithm "
                "that does not size models by capacity trains the scenario's model on every "
                "client, and one that does may not go below its narrowest width"},
        {0},
};
#undef K

/* error_feedback's default: on for topk (its residual is what makes a small ratio converge) */
static void ef_default(const sim_key_ctx *ctx, char *buf, size_t n)
{
    const nn_comp *c = ctx->config;
    snprintf(buf, n, "%s", c->scheme == NN_COMP_TOPK ? "true" : "false");
}

/* compression.up and .down: scheme first, then the keys the scheme reads (scenario.c) */
#define K(field) .offset = offsetof(nn_comp, field)
const sim_key sim_keys_compression[] = {
        {"scheme", SIM_KEY_CHOICE, K(scheme), .dflt = "none", .words = nn_comp_names,
         .doc = "`none` (the dense float32 message), `topk` (the `ratio` largest values and their "
                "indices), `randk` (`ratio` of the values at seeded random indices, scaled by "
                "n/k), `qsgd` (stochastic quantization to `levels` levels and the norm), `sign` "
                "(a bit each and their mean magnitude), `fp16`, `bf16` (casts); `down` takes "
                "`none`, `qsgd`, `fp16` or `bf16` only"},
        {"ratio", SIM_KEY_DOUBLE, K(ratio), .custom = 1, .dflt = "0.1", .lo = 1e-9, .hi = 1,
         .unit = "share", .doc = "topk, randk: the share of values sent, k = ⌈ratio·n⌉"},
        {"levels", SIM_KEY_INT, K(levels), .custom = 1, .dflt = "255", .lo = 1,
         .hi = NN_COMP_MAX_LEVELS,
         .doc = "qsgd: s, the levels per sign: ⌈log2(2s+1)⌉ bits a value (255: 9 bits, 15: 5)"},
        {"error_feedback", SIM_KEY_BOOL, K(error_feedback), .custom = 1,
         .dflt = "true for topk, else false", .dflt_fn = ef_default,
         .doc = "up only, not randk: add what the client's last upload left out to its next "
                "update (kept in its private state)"},
        {0},
};
#undef K

/* a file of the measured phones' data, beside the default catalog (devices/phones/) */
static void phones_file(char *buf, size_t n, const char *file)
{
    const char *cat = sim_default_catalog(), *slash = strrchr(cat, '/');
    int dir = slash ? (int)(slash - cat + 1) : 0;
    snprintf(buf, n, "%.*sphones/%s", dir, cat, file);
}

static void phone_list_default(const sim_key_ctx *ctx, char *buf, size_t n)
{
    (void)ctx;
    phones_file(buf, n, "ai_benchmark.tsv");
}

static void bandwidth_default(const sim_key_ctx *ctx, char *buf, size_t n)
{
    (void)ctx;
    phones_file(buf, n, "bandwidth.tsv");
}

#define K(field) .offset = offsetof(sim_population_keys, field)
const sim_key sim_keys_population[] = {
        {"phones", SIM_KEY_DOUBLE, K(phones), .dflt = "1", .lo = 0, .hi = 1e9,
         .doc = "how many clients are phones of the population: a share in [0, 1] (of the "
                "clients, rounded to the nearest; 1: all) or a whole count above 1; the rest "
                "take `devices.mix`, by its shares"},
        {"reference", SIM_KEY_STRING, K(reference),
         .size = sizeof(((sim_population_keys *)0)->reference), .dflt = "meizu-16t",
         .doc = "the measured profile (catalog or `devices.profiles`, without distributions) "
                "every phone is scaled from: its compute, step_overhead and mem_bandwidth by "
                "(score / reference_score)^exponent, its memory replaced by the phone's RAM, "
                "its up and down by the user's draws; latency, availability, sparse_eff and "
                "capacity kept"},
        {"reference_score", SIM_KEY_DOUBLE, K(reference_score), .dflt = "3120", .lo = 1, .hi = 1e9,
         .doc = "the reference phone's CPU_F_AI_Score (3120: the Meizu 16s, the 16T's Snapdragon "
                "855 sibling; the list's 39 Snapdragon 855 phones score 2717 to 4310)"},
        {"exponent", SIM_KEY_DOUBLE, K(exponent), .dflt = "0.65", .lo = 0, .hi = 4,
         .doc = "a phone's step time scales by score^-exponent; 0.65 fits FLASH's measured "
                "per-batch times of three phones (devices/phones/README.md, with its errors)"},
        {"floor", SIM_KEY_DOUBLE, K(floor), .dflt = "0.1", .lo = 0, .hi = 0.99,
         .doc = "each transfer (a job's download, its upload) draws its rate from Normal(mean, "
                "sigma) of the client's measured user, redrawn below floor × mean"},
        {"list", SIM_KEY_STRING, K(list), .size = sizeof(((sim_population_keys *)0)->list),
         .dflt = "devices/phones/ai_benchmark.tsv", .dflt_fn = phone_list_default,
         .doc = "the phones (AI-Benchmark's list as FLASH ships it), drawn uniformly: model, cpu, "
                "ram_gib, year, cpu_f_score, tab-separated"},
        {"bandwidth", SIM_KEY_STRING, K(bandwidth),
         .size = sizeof(((sim_population_keys *)0)->bandwidth),
         .dflt = "devices/phones/bandwidth.tsv", .dflt_fn = bandwidth_default,
         .doc = "the users' measured bandwidth (FLASH's 19), drawn uniformly: user, down_mean, "
                "down_sigma, up_mean, up_sigma in KiB/s"},
        {0},
};
#undef K

#define K(field) .offset = offsetof(sim_link_keys, field)
const sim_key sim_keys_network[] = {
        {"server", SIM_KEY_MAP, .custom = 1,
         .doc = "the server's link, `{up: 10 Gbps, down: 10 Gbps}`: every upload crosses `up`, "
                "every download `down` (`network.server` below)"},
        {"groups", SIM_KEY_LIST, .custom = 1,
         .doc = "shared access links (a cell, an access point), each `{name, up, down, devices, "
                "share}`: the clients behind one cross its link as well as their own and the "
                "server's (`network.groups.N` below)"},
        {"assign", SIM_KEY_STRING, .custom = 1,
         .doc = "which clients sit behind which group, from a file (path relative to the "
                "scenario's folder): a TSV with the header `client<TAB>group` and a line per "
                "client behind a group (ids from 0, names of `groups`); the clients it does not "
                "list are behind none, and the groups then take no `devices` or `share`"},
        {0},
};

const sim_key sim_keys_network_server[] = {
        {"up", SIM_KEY_RATE, K(up), .doc = "capacity shared by all uploads; absent: unlimited"},
        {"down", SIM_KEY_RATE, K(down),
         .doc = "capacity shared by all downloads; absent: unlimited"},
        {0},
};

const sim_key sim_keys_network_group[] = {
        {"name", SIM_KEY_STRING, K(name), .size = sizeof(((sim_link_keys *)0)->name),
         .doc = "the group's name (in messages); required"},
        {"up", SIM_KEY_RATE, K(up),
         .doc = "capacity shared by its clients' uploads; absent: unlimited"},
        {"down", SIM_KEY_RATE, K(down),
         .doc = "capacity shared by its clients' downloads; absent: unlimited"},
        {"devices", SIM_KEY_LIST, .custom = 1,
         .doc = "the device profiles (names in `devices.mix`) whose clients it may take; absent: "
                "any client"},
        {"share", SIM_KEY_DOUBLE, K(share), .dflt = "1", .lo = 0, .hi = 1,
         .doc = "the share of those clients behind it (rounded to the nearest count), drawn in a "
                "seeded order among the ones no earlier group took"},
        {0},
};
#undef K

static const char COMPRESSION_DOC[] =
        "How updates (`up`) and models (`down`) travel. The encoded message is real msgpack, "
        "and its length is what the run charges; algorithms whose messages are not the "
        "model's parameters or their change (whole, its shared layers or a sub-model) refuse a "
        "scheme other than `none`, saying why.";
static const char NETWORK_DOC[] =
        "Without it every transfer has its client's link to itself: latency + 8 × bytes / "
        "bandwidth. With it a transfer is a flow over its client's link, its group's and the "
        "server's; flows share a link by max-min fairness, re-solved whenever one starts or "
        "ends, and the latency is added per transfer.";

static const char PARTITION_DOC[] = "Relative paths are taken from the scenario file's folder.";
static const char POPULATION_DOC[] =
        "Phones built from public measurements (devices/phones/README.md): each client of the "
        "population gets a phone of the list and a user's network, drawn from the stream (seed, "
        "phones, client). Relative paths are taken from the scenario file's folder.";
static const char EVAL_DOC[] = "Evaluation is an observer: it costs no simulated time.";

int sim_scenario_keys_print(FILE *f, const char *filter, int markdown)
{
    int n = sim_keys_print(f, "", NULL, sim_keys_top, filter, markdown);
    n += sim_keys_print(f, "dataset", NULL, sim_keys_dataset, filter, markdown);
    n += sim_keys_print(f, "partition", PARTITION_DOC, sim_keys_partition, filter, markdown);
    n += fl_keys_print(f, filter, markdown);
    n += sim_keys_print(f, "federation", NULL, sim_keys_federation, filter, markdown);
    n += sim_keys_print(f, "federation.staleness", NULL, sim_keys_staleness, filter, markdown);
    n += sim_sel_keys_print(f, filter, markdown);
    n += sim_keys_print(f, "compression.up", COMPRESSION_DOC, sim_keys_compression, filter,
                        markdown);
    n += sim_keys_print(f, "compression.down", NULL, sim_keys_compression, filter, markdown);
    n += sim_keys_print(f, "eval", EVAL_DOC, sim_keys_eval, filter, markdown);
    n += sim_keys_print(f, "devices", NULL, sim_keys_devices, filter, markdown);
    n += sim_keys_print(f, "devices.profiles.NAME", dev_profile_doc, dev_profile_keys, filter,
                        markdown);
    n += sim_keys_print(f, "devices.population", POPULATION_DOC, sim_keys_population, filter,
                        markdown);
    n += sim_keys_print(f, "network", NETWORK_DOC, sim_keys_network, filter, markdown);
    n += sim_keys_print(f, "network.server", NULL, sim_keys_network_server, filter, markdown);
    n += sim_keys_print(f, "network.groups.N", NULL, sim_keys_network_group, filter, markdown);
    return n;
}

/* ---- hints about an unknown key: what it was likely meant to be, or where it belongs ---- */

/* The keys a map of a scenario may hold: its path ("*" for a name or an index of the user's),
 * how a message names it, and its table and extra names (the sections below it). */
typedef struct vocab {
    char path[64];
    char where[80]; /* "federation:", "" for the top level */
    const sim_key *keys;
    const char *const *words;
    int algorithm; /* `algorithm:` itself: its sections' names are its keys too */
} vocab;

static const char *const TOP_SECTIONS[] = {"dataset",     "partition", "algorithm",
                                           "federation",  "eval",      "devices",
                                           "compression", "network",   NULL};
static const char *const COMP_DIRS[] = {"up", "down", NULL};
static const char *const ALGO_NAME[] = {"name", NULL};
static const char *const MIX_KEYS[] = {"profile", "share", NULL};

static int vocab_add(vocab *v, int n, const char *path, const char *where, const sim_key *keys,
                     const char *const *words)
{
    v[n] = (vocab){.keys = keys, .words = words, .algorithm = !strcmp(path, "algorithm")};
    snprintf(v[n].path, sizeof v[n].path, "%s", path);
    snprintf(v[n].where, sizeof v[n].where, "%s", where);
    return n + 1;
}

/* A named sub-map's (algorithm.NAME, federation.selection.NAME), said as "PARENT.NAME:". */
static int vocab_sub(vocab *v, int n, const char *parent, const char *name, const sim_key *keys)
{
    char path[64], where[80];
    snprintf(path, sizeof path, "%s.%s", parent, name);
    snprintf(where, sizeof where, "%s:", path);
    return vocab_add(v, n, path, where, keys, NULL);
}

/* Every map's vocabulary; returns how many. */
static int vocabs(vocab *v)
{
    int n = vocab_add(v, 0, "", "", sim_keys_top, TOP_SECTIONS);
    n = vocab_add(v, n, "dataset", "dataset:", sim_keys_dataset, NULL);
    n = vocab_add(v, n, "partition", "partition:", sim_keys_partition, NULL);
    n = vocab_add(v, n, "algorithm", "algorithm:", fl_keys_common, ALGO_NAME);
    for (int i = 0; fl_sections[i]; i++)
        n = vocab_sub(v, n, "algorithm", fl_sections[i]->name, fl_sections[i]->keys);
    n = vocab_add(v, n, "federation", "federation:", sim_keys_federation, NULL);
    n = vocab_add(v, n, "federation.staleness", "federation.staleness:", sim_keys_staleness, NULL);
    n = vocab_add(v, n, "federation.selection", "federation.selection:", sim_sel_keys, NULL);
    for (int i = 0; sim_sel_policies[i]; i++)
        if (sim_sel_policies[i]->keys)
            n = vocab_sub(v, n, "federation.selection", sim_sel_policies[i]->name,
                          sim_sel_policies[i]->keys);
    n = vocab_add(v, n, "eval", "eval:", sim_keys_eval, NULL);
    n = vocab_add(v, n, "compression", "compression:", NULL, COMP_DIRS);
    n = vocab_add(v, n, "compression.up", "compression.up:", sim_keys_compression, NULL);
    n = vocab_add(v, n, "compression.down", "compression.down:", sim_keys_compression, NULL);
    n = vocab_add(v, n, "devices", "devices:", sim_keys_devices, NULL);
    n = vocab_add(v, n, "devices.profiles.*", "devices.profiles.NAME:", dev_profile_keys, NULL);
    n = vocab_add(v, n, "devices.population", "devices.population:", sim_keys_population, NULL);
    n = vocab_add(v, n, "devices.mix.*", "devices.mix.N:", NULL, MIX_KEYS);
    n = vocab_add(v, n, "network", "network:", sim_keys_network, NULL);
    n = vocab_add(v, n, "network.server", "network.server:", sim_keys_network_server, NULL);
    return vocab_add(v, n, "network.groups.*", "network.groups.N:", sim_keys_network_group, NULL);
}

/* v's names, NULL-ended, into out (room for cap) */
static void vocab_names(const vocab *v, const char **out, int cap)
{
    int n = 0;
    for (const sim_key *k = v->keys; k && k->name && n < cap - 1; k++)
        out[n++] = k->name;
    for (int i = 0; v->words && v->words[i] && n < cap - 1; i++)
        out[n++] = v->words[i];
    for (int i = 0; v->algorithm && fl_sections[i] && n < cap - 1; i++)
        out[n++] = fl_sections[i]->name;
    for (int i = 0; !strcmp(v->path, "federation.selection") && sim_sel_policies[i] && n < cap - 1;
         i++) /* its policies' sections */
        if (sim_sel_policies[i]->keys) out[n++] = sim_sel_policies[i]->name;
    out[n] = NULL;
}

/* Whether the dotted path matches pattern, whose "*" stands for any one part. */
static int path_matches(const char *path, const char *pattern)
{
    for (;;) {
        size_t a = strcspn(path, "."), b = strcspn(pattern, ".");
        if (!(b == 1 && pattern[0] == '*') && (a != b || strncmp(path, pattern, a))) return 0;
        if (!path[a] || !pattern[b]) return !path[a] && !pattern[b];
        path += a + 1;
        pattern += b + 1;
    }
}

void sim_scenario_hint(const sim_yaml *doc, sim_err *err)
{
    char path[256] = "";
    int at;
    const sim_yaml *map = sim_yaml_unknown(doc, &at, path, sizeof path);
    if (!map) return;
    const char *key = map->keys[at];
    char said[160];
    snprintf(said, sizeof said, "unknown key '%s'", key);
    if (strcmp(err->msg, said)) return; /* another message, about this key or not */
    vocab v[16 + FL_MAX_SECTIONS];
    const char *names[128];
    int n = vocabs(v), own = -1;
    for (int i = 0; i < n && own < 0; i++)
        if (path_matches(path, v[i].path)) own = i;
    if (own < 0) return; /* a map whose keys are no table's (an availability spec) */
    size_t len = strlen(err->msg), cap = sizeof err->msg;
    vocab_names(&v[own], names, 128);
    const char *near = sim_keys_closest(key, names);
    if (near) {
        snprintf(err->msg + len, cap - len, "; did you mean '%s'?", near);
        return;
    }
    int found = 0; /* the sections it is a key of (the first three) */
    for (int i = 0; i < n && found < 3; i++) {
        vocab_names(&v[i], names, 128);
        for (int j = 0; i != own && names[j]; j++)
            if (!strcmp(names[j], key)) {
                len = strlen(err->msg);
                snprintf(err->msg + len, cap - len, "%s%s%s", found ? " or " : "; it belongs ",
                         v[i].where[0] ? (found ? "" : "under ") : "at the top level", v[i].where);
                found++;
                break;
            }
    }
    if (found) return;
    int best = -1, bd = 0; /* else a key it is a slip of elsewhere */
    for (int i = 0; i < n; i++) {
        vocab_names(&v[i], names, 128);
        for (int j = 0; names[j]; j++) {
            int d = sim_keys_misspelling(key, names[j]);
            if (d >= 0 && (best < 0 || d < bd)) best = i, bd = d, near = names[j];
        }
    }
    if (best >= 0)
        snprintf(err->msg + len, cap - len, "; did you mean '%s' %s%s?", near,
                 v[best].where[0] ? "under " : "at the top level", v[best].where);
}
