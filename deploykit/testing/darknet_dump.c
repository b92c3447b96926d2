/* Darknet's own forward pass for deploykit.testing.darknet: run Debian's libdarknet on an input and
 * dump chosen layers' outputs.
 * usage: darknet_dump CFG WEIGHTS INPUT.bin OUTPUT.bin LAYER [LAYER ...]
 * INPUT.bin holds net->inputs float32 values (C x H x W); OUTPUT.bin gets, per layer,
 * int32 out_c, out_h, out_w, outputs followed by that layer's `outputs` float32 values
 * (some layers, such as [softmax], leave out_c/out_h/out_w at 0). */
#include <stdio.h>
#include <stdlib.h>
#include "darknet.h"

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s CFG WEIGHTS INPUT OUTPUT LAYER...\n", argv[0]);
        return 2;
    }
    network *net = load_network(argv[1], argv[2], 0);
    set_batch_network(net, 1);
    for (int i = 5; i < argc; ++i) {
        int index = atoi(argv[i]);
        if (index < 0 || index >= net->n) {
            fprintf(stderr, "layer %d is out of range: the network has %d layers\n", index, net->n);
            return 1;
        }
    }
    float *input = calloc(net->inputs, sizeof(float));
    FILE *in = fopen(argv[3], "rb");
    if (!in || fread(input, sizeof(float), net->inputs, in) != (size_t)net->inputs || fgetc(in) != EOF) {
        fprintf(stderr, "the input is not %d floats (%d x %d x %d) as the cfg's [net] says\n", net->inputs, net->c,
                net->h, net->w);
        return 1;
    }
    fclose(in);
    network_predict(net, input);
    FILE *out = fopen(argv[4], "wb");
    if (!out) {
        fprintf(stderr, "cannot write %s\n", argv[4]);
        return 1;
    }
    for (int i = 5; i < argc; ++i) {
        layer l = net->layers[atoi(argv[i])];
        int dims[4] = {l.out_c, l.out_h, l.out_w, l.outputs};
        fwrite(dims, sizeof(int), 4, out);
        fwrite(l.output, sizeof(float), l.outputs, out);
    }
    if (fclose(out) != 0) {
        fprintf(stderr, "cannot write %s\n", argv[4]);
        return 1;
    }
    free(input);
    return 0;
}
