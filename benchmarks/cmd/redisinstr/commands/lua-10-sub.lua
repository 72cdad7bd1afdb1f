local a, b, c = '@j81000000/1000000000:1796616088 1796616088753908', '@j81000000/1000000000:', '1796616088753908'
local x
x = string.sub(a, 5, 20)
x = string.sub(a, 5, 20)
x = string.sub(a, 5, 20)
x = string.sub(a, 5, 20)
x = string.sub(a, 5, 20)
x = string.sub(a, 5, 20)
x = string.sub(a, 5, 20)
x = string.sub(a, 5, 20)
x = string.sub(a, 5, 20)
x = string.sub(a, 5, 20)
return 1
