// same_tokens: the cross-language check (docs: bindings.md). Loads the model
// argv[0], generates greedily (max_new_tokens 32, ignore_eog) from three
// prompts: 1..24 at the root, [30 31 32] and [40 41] under it, and prints
// one line per sequence: its generated token ids, separated by spaces.
// Run: LD_LIBRARY_PATH=BUILD mono BUILD/bindings/csharp/same_tokens.exe MODEL
using System;
using System.Collections.Generic;
using Clade;

public static class SameTokens
{
    public static int Main(string[] args)
    {
        if (args.Length != 1)
        {
            Console.Error.WriteLine("usage: mono same_tokens.exe MODEL.gguf");
            return 2;
        }
        try
        {
            using (var model = new Model(args[0]))
            using (var tree = new Tree(model))
            {
                var first = new int[24];
                for (int i = 0; i < first.Length; i++) first[i] = i + 1;
                var prompts = new List<Prompt> {
                    new Prompt(first, -1), new Prompt(new[] { 30, 31, 32 }, 0), new Prompt(new[] { 40, 41 }, 0),
                };
                var p = new GenerateParams { MaxNewTokens = 32, IgnoreEog = true, Sampler = SamplerParams.Greedy() };
                foreach (var g in tree.Generate(prompts, p))
                    Console.WriteLine(string.Join(" ", g.Tokens));
            }
            return 0;
        }
        catch (Exception e)
        {
            Console.Error.WriteLine("same_tokens: " + e.Message);
            return 1;
        }
    }
}
