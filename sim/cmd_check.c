/* sim/cmd_check.c -- `fedsim check`: a scenario validated and resolved, with what one job of the
 * average client costs on each device of the mix (priced as the algorithm prices round 1's),
 * whether the model fits, and warnings.
 */
#include "nn/pack.h"
#include "sim/cmd.h"
#include "sim/cost.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int cmd_check(int argc, char **argv, rank_hooks *ranks)
{
    (void)ranks;
    run_opts o;
    if (sim_cli_parse_run(&o, argc, argv, OPTS_CHECK)) return SIM_CLI_BAD_ARGS;
    int rc = 0;
    sim_err err = {0};
    sim_scenario sc;
    if (sim_cli_load_scenario(&sc, &o, &err)) return sim_cli_print_err(&err);
    if (sim_yaml_write(sc.doc, stdout, &err)) {
        sim_scenario_destroy(&sc);
        return sim_cli_print_err(&err);
    }
    /* predicted cost of one job of an average client, per device profile in the mix */
    nn_model m;
    nn_model_init(&m, &sc.arch, sc.cfg.batch_size);
    int n = sc.part.n_clients;
    double avg = 0;
    for (int c = 0; c < n; c++)
        avg += sc.part.n[c];
    avg /= n;
    int B = sc.cfg.batch_size, per_epoch = (int)ceil(avg / B);
    int steps = sc.cfg.local_steps > 0 ? sc.cfg.local_steps : sc.cfg.local_epochs * per_epoch;
    nn_cost step;
    nn_model_step_cost(&m, B, &step);
    double flops = step.flops * steps, act = step.bytes * steps,
           mem = (double)nn_model_memory_bytes(&m, B);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    nn_pack_params(&sb, &sc.arch, m.params);
    double msg = sim_message_bytes(&sc.spec, sb.size);
    msgpack_sbuffer_destroy(&sb);
    char ms[32], mm[32], ma[32];
    sim_format_bytes(ms, sizeof ms, msg);
    sim_format_bytes(mm, sizeof mm, mem);
    sim_format_bytes(ma, sizeof ma, act);
    printf("\n# model %s: %zu parameters; a job of %.0f samples (%d steps of %d) executes %.3g "
           "FLOPs and writes %s of activations; a dense message is %s; training needs %s\n",
           sc.model, sc.arch.layout.n_params, avg, steps, B, flops, ma, ms, mm);
    /* the clients' own splits: what they train on, are tested on and validate on, on average */
    double nt = 0, nv = 0;
    for (int c = 0; c < n; c++) {
        nt += sc.part.n_test ? sc.part.n_test[c] : 0;
        nv += sc.part.n_val ? sc.part.n_val[c] : 0;
    }
    printf("# a client's samples, on average: %.1f to train on, %.1f to test on (its local test "
           "split), %.1f to validate on\n",
           avg, nt / n, nv / n);
    /* what the clients' capacities make of the model, for algorithms that size it by client */
    double rlo = 1, rhi = 0, rsum = 0, wlo = 1, whi = 0, wsum = 0;
    for (int c = 0; c < n && sc.spec.algo->client_width; c++) {
        double r = sc.capacity[c], w = sc.spec.algo->client_width(&sc.spec.env, c);
        rlo = r < rlo ? r : rlo, rhi = r > rhi ? r : rhi, rsum += r;
        wlo = w < wlo ? w : wlo, whi = w > whi ? w : whi, wsum += w;
    }
    if (sc.spec.algo->client_width)
        printf("# capacity r_i: %.3g … %.3g, mean %.3g; models trained %.3g … %.3g wide, mean "
               "%.3g (a sparse one counts as √density wide)\n",
               rlo, rhi, rsum / n, wlo, whi, wsum / n);
    sim_cli_print_warnings(&sc, stdout, "# warning: ");
    /* Each device's row prices the average client's job as the algorithm prices its first
     * client on that device in round 1 (a cost-only job: the width, budget or masks it trains and
     * the messages it exchanges), the training scaled to the average client's samples. */
    fl_env env = sc.spec.env;
    env.cost_only = 1;
    sim_err aerr = {0};
    void *server = sc.spec.algo->server_new(&env, &aerr), *dense = NULL;
    if (server) dense = fl_dense->server_new(&env, &aerr);
    if (!dense) {
        if (server) sc.spec.algo->server_free(server);
        nn_model_destroy(&m);
        sim_scenario_destroy(&sc);
        return sim_cli_print_err(&aerr);
    }
    fl_worker wk;
    fl_worker_init(&wk);
    printf("# per device, the average client's job as the algorithm prices round 1's:\n");
    printf("# %-20s %8s %12s %12s %12s %12s %6s\n", "device", "clients", "download", "train",
           "upload", "job", "fits");
    for (int c = 0; c < n; c++) {
        const dev_profile *d = &sc.devices[c];
        int seen = 0;
        for (int k = 0; k < c && !seen; k++)
            seen = !strcmp(sc.devices[k].name, d->name);
        if (seen) continue;
        /* the client's job, and FedAvg's on the same samples: the ratio is what the algorithm
         * saves (or adds) in training */
        fl_job job = {
                c, 0, NULL, sc.spec.algo->job_down(server, c, 0, NULL), NULL, 0, (uint64_t)c << 32};
        fl_job ref = {c, 0, NULL, fl_dense->job_down(dense, c, 0, NULL), NULL, 0, job.stream};
        fl_result res, rd;
        fl_result_init(&res);
        fl_result_init(&rd);
        if (sc.spec.algo->client_train(&env, &job, &wk, &res, &aerr) ||
            fl_dense->client_train(&env, &ref, &wk, &rd, &aerr))
            rc = sim_cli_print_err(&aerr);
        dev_work rw = sim_cost_work(&res.cost, res.steps);
        double work = dev_work_flops(d, &rw), ratio = rd.cost.flops > 0 ? work / rd.cost.flops : 1,
               act_ratio = rd.cost.bytes > 0 ? res.cost.bytes / rd.cost.bytes : 1,
               step_ratio = rd.steps > 0 ? (double)res.steps / rd.steps : 1;
        double down_b = sim_message_bytes(&sc.spec, job.down_len),
               up_b = sim_message_bytes(&sc.spec, res.up_bytes);
        fl_result_destroy(&res);
        fl_result_destroy(&rd);
        if (rc) break;
        /* how many of its clients hold the model they train (their width's), as the run counts */
        int count = 0, fit = 0;
        double width = 1, need = mem;
        for (int k = 0; k < n; k++) {
            if (strcmp(sc.devices[k].name, d->name)) continue;
            double w = sim_client_width(&sc.spec, k);
            if (w != width) need = sim_width_memory(&sc.spec, width = w, &m);
            count++;
            fit += dev_fits(&sc.devices[k], need);
        }
        char fits[32] = "yes";
        if (fit < count) snprintf(fits, sizeof fits, fit ? "%d/%d" : "NO", fit, count);
        /* the average client's training: the model's, scaled by the algorithm's ratios (its FLOPs
         * are executed ones already, nothing masked is left to skip) */
        dev_job aj = {.work = {.flops = flops * ratio,
                               .bytes = act * act_ratio,
                               .steps = steps * step_ratio},
                      .down_bytes = down_b,
                      .up_bytes = up_b};
        dev_phases ph;
        dev_price(d, &aj, 0, &ph);
        char a[32], b[32], cc[32], j[32];
        sim_format_time(a, sizeof a, ph.down);
        sim_format_time(b, sizeof b, ph.train);
        sim_format_time(cc, sizeof cc, ph.up);
        sim_format_time(j, sizeof j, ph.up_end);
        printf("# %-20s %8d %12s %12s %12s %12s %6s\n", d->name, count, a, b, cc, j, fits);
    }
    fl_worker_destroy(&wk);
    sc.spec.algo->server_free(server);
    fl_dense->server_free(dense);
    nn_model_destroy(&m);
    sim_scenario_destroy(&sc);
    return rc;
}

static const char check_usage[] =
        "usage: fedsim check SCENARIO [--set key=value]... [--seed N]\n"
        "\n"
        "Validate, print the resolved scenario and per-device predicted job cost (the\n"
        "average client's, as the algorithm prices its first round: the width, budget or\n"
        "masks trained and the messages sent), memory fit and warnings (settings that run\n"
        "as asked but may not be what was meant). --set and --seed as fedsim run's.\n";

const sim_command sim_cmd_check = {
        .name = "check",
        .summary = "validate a scenario; print it resolved, each device's job cost and warnings",
        .usage = check_usage,
        .fn = cmd_check,
};
